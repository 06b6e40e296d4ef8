// Package packidx reads a version 2 pack index in place, for the mirror's
// object store: the file is mapped where the system can, checked against
// its size before any lookup, and a fault in the mapping (the file cut
// short under it) is an error of the lookup ([ErrFault]), never a SIGBUS.
// It is go-git's idxfile.Index, without the decoding that holds about 60
// bytes per object.
package packidx

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/idxfile"
)

// Index is a version 2 pack index read in place: the file is mapped
// into memory where the system can (read whole elsewhere), and a lookup
// reads the few pages it needs. go-git decodes an index into slices and,
// at the first lookup by offset, a map, about 60 bytes per object of the
// mirror held for as long as the store is open; this holds nothing per
// object but, once something asks for a hash by offset (a delta's base),
// 4 bytes for the objects in offset order. It implements idxfile.Index and
// is safe for concurrent use.
type Index struct {
	data   []byte
	mapped bool // data is a mapping of the file (see recoverFault)
	count  int
	large  int // 8-byte offsets, for packs over 2 GiB
	// sections of data
	names, crcs, offsets, offsets64 int

	revOnce sync.Once
	rev     []uint32 // positions in offset order
	revErr  error
}

// MapThreshold is the size from which an index is mapped, not read.
const MapThreshold = 1 << 20

// The fixed parts of a version 2 index: the header (magic and version),
// the fanout table, and the trailer (the pack's checksum and the index's).
const (
	HeaderSize  = 8
	FanoutSize  = 256 * 4
	TrailerSize = 40
)

// Open maps the index at path and checks that its structure fits
// its size (so that no lookup reads past it), that its fanout ascends and
// that it is the index of pack.
func Open(path string, pack plumbing.Hash) (*Index, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() < HeaderSize+FanoutSize+TrailerSize || st.Size() > 1<<40 {
		return nil, fmt.Errorf("%w: %s is %d bytes", idxfile.ErrMalformedIdxFile, path, st.Size())
	}
	// Small indexes (most, in a mirror of incremental fetches) are read
	// whole: a mapping costs a page and one of the process's limited
	// count of mappings. A mapping refused is a read.
	var data []byte
	unmap := func() error { return nil }
	mapped := false
	if st.Size() >= MapThreshold {
		if d, u, err := mapFile(f, int(st.Size())); err == nil {
			data, unmap, mapped = d, u, true
		}
	}
	if data == nil {
		data = make([]byte, st.Size())
		if _, err := io.ReadFull(f, data); err != nil {
			return nil, err
		}
	}
	idx, err := checkedIndex(data, pack, mapped)
	if err != nil {
		_ = unmap()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	runtime.AddCleanup(idx, func(unmap func() error) { _ = unmap() }, unmap)
	return idx, nil
}

// checkedIndex reads the index in data (mapped or not) and checks that it
// is the index of pack.
func checkedIndex(data []byte, pack plumbing.Hash, mapped bool) (idx *Index, err error) {
	if mapped {
		defer recoverFault(&err, debug.SetPanicOnFault(true))
	}
	if idx, err = New(data); err != nil {
		return nil, err
	}
	idx.mapped = mapped
	if !bytes.Equal(data[len(data)-TrailerSize:len(data)-20], pack[:]) {
		return nil, fmt.Errorf("%w: index of pack %s is for another pack", idxfile.ErrMalformedIdxFile, pack)
	}
	return idx, nil
}

// ErrFault is what reading a mapped index whose file was cut short
// under the mapping (by another process, a failing disk) gives instead of
// the SIGBUS that would end the program: an index the damage decision
// verifies, finds cut short, and rebuilds.
var ErrFault = fmt.Errorf("%w: fault reading a mapped index (its file changed under the mapping)", idxfile.ErrMalformedIdxFile)

// recoverFault, deferred by every method that reads a mapping with
//
//	defer recoverFault(&err, debug.SetPanicOnFault(true))
//
// turns a memory fault there into ErrFault, and restores the
// goroutine's setting. Any other panic goes on.
func recoverFault(err *error, old bool) {
	r := recover()
	debug.SetPanicOnFault(old)
	if r == nil {
		return
	}
	if _, fault := r.(interface{ Addr() uintptr }); fault {
		*err = ErrFault
		return
	}
	panic(r)
}

// New reads the index in data, which is not copied.
func New(data []byte) (*Index, error) {
	if len(data) < HeaderSize+FanoutSize+TrailerSize {
		return nil, fmt.Errorf("%w: %d bytes", idxfile.ErrMalformedIdxFile, len(data))
	}
	count, large, err := Layout(data[:HeaderSize+FanoutSize], int64(len(data)))
	if err != nil {
		return nil, err
	}
	idx := &Index{data: data, count: int(count), large: int(large)}
	idx.names = HeaderSize + FanoutSize
	idx.crcs = idx.names + 20*idx.count
	idx.offsets = idx.crcs + 4*idx.count
	idx.offsets64 = idx.offsets + 4*idx.count
	return idx, nil
}

// Layout checks the head of a version 2 index (its header and fanout)
// against the index's size: the fanout must not decrease, and the names,
// CRCs, offsets and 8-byte offsets it implies must fill the size exactly.
// It returns the object count and the count of 8-byte offsets.
func Layout(head []byte, size int64) (count, large int64, err error) {
	if !bytes.Equal(head[:HeaderSize], []byte{0xff, 't', 'O', 'c', 0, 0, 0, 2}) {
		return 0, 0, fmt.Errorf("%w: not a version 2 index", idxfile.ErrMalformedIdxFile)
	}
	prev := uint32(0)
	for k := range 256 {
		n := binary.BigEndian.Uint32(head[HeaderSize+4*k:])
		if n < prev {
			return 0, 0, fmt.Errorf("%w: fanout decreases at %d", idxfile.ErrMalformedIdxFile, k)
		}
		prev = n
	}
	count = int64(prev)
	least := HeaderSize + FanoutSize + count*(20+4+4) + TrailerSize
	if size < least || (size-least)%8 != 0 {
		return 0, 0, fmt.Errorf("%w: %d bytes for %d objects (cut short?)", idxfile.ErrMalformedIdxFile, size, count)
	}
	return count, (size - least) / 8, nil
}

func (x *Index) fanout(b int) int {
	if b < 0 {
		return 0
	}
	return int(binary.BigEndian.Uint32(x.data[HeaderSize+4*b:]))
}

func (x *Index) name(pos int) []byte { return x.data[x.names+20*pos : x.names+20*pos+20] }

// find returns the position of h, or -1.
func (x *Index) find(h plumbing.Hash) int {
	lo, hi := x.fanout(int(h[0])-1), x.fanout(int(h[0]))
	i := lo + sort.Search(hi-lo, func(i int) bool { return bytes.Compare(x.name(lo+i), h[:]) >= 0 })
	if i < hi && bytes.Equal(x.name(i), h[:]) {
		return i
	}
	return -1
}

func (x *Index) offset(pos int) (int64, error) {
	o := binary.BigEndian.Uint32(x.data[x.offsets+4*pos:])
	if o&(1<<31) == 0 {
		return int64(o), nil
	}
	k := int(o &^ (1 << 31))
	if k >= x.large {
		return 0, fmt.Errorf("%w: offset %d past the large offsets", idxfile.ErrMalformedIdxFile, k)
	}
	v := binary.BigEndian.Uint64(x.data[x.offsets64+8*k:])
	if v > 1<<62 {
		return 0, fmt.Errorf("%w: offset %d", idxfile.ErrMalformedIdxFile, v)
	}
	return int64(v), nil
}

// Contains reports whether the pack holds h.
func (x *Index) Contains(h plumbing.Hash) (ok bool, err error) {
	if x.mapped {
		defer recoverFault(&err, debug.SetPanicOnFault(true))
	}
	return x.find(h) >= 0, nil
}

// FindOffset returns the offset of h in the pack.
func (x *Index) FindOffset(h plumbing.Hash) (off int64, err error) {
	if x.mapped {
		defer recoverFault(&err, debug.SetPanicOnFault(true))
	}
	pos := x.find(h)
	if pos < 0 {
		return 0, plumbing.ErrObjectNotFound
	}
	return x.offset(pos)
}

// FindCRC32 returns the CRC32 of h's entry in the pack.
func (x *Index) FindCRC32(h plumbing.Hash) (crc uint32, err error) {
	if x.mapped {
		defer recoverFault(&err, debug.SetPanicOnFault(true))
	}
	pos := x.find(h)
	if pos < 0 {
		return 0, plumbing.ErrObjectNotFound
	}
	return binary.BigEndian.Uint32(x.data[x.crcs+4*pos:]), nil
}

// byOffset returns the positions in offset order, made at the first call.
func (x *Index) byOffset() ([]uint32, error) {
	x.revOnce.Do(func() {
		if x.mapped {
			defer recoverFault(&x.revErr, debug.SetPanicOnFault(true))
		}
		offs := make([]int64, x.count)
		for pos := range offs {
			if offs[pos], x.revErr = x.offset(pos); x.revErr != nil {
				return
			}
		}
		rev := make([]uint32, x.count)
		for i := range rev {
			rev[i] = uint32(i)
		}
		slices.SortFunc(rev, func(a, b uint32) int { return cmp.Compare(offs[a], offs[b]) })
		x.rev = rev
	})
	return x.rev, x.revErr
}

// FindHash returns the object at offset o of the pack.
func (x *Index) FindHash(o int64) (h plumbing.Hash, err error) {
	if x.mapped {
		defer recoverFault(&err, debug.SetPanicOnFault(true))
	}
	rev, err := x.byOffset()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	var found error
	i := sort.Search(len(rev), func(i int) bool {
		off, err := x.offset(int(rev[i]))
		if err != nil {
			found = err
		}
		return off >= o
	})
	if found != nil {
		return plumbing.ZeroHash, found
	}
	if i < len(rev) {
		if off, _ := x.offset(int(rev[i])); off == o {
			copy(h[:], x.name(int(rev[i])))
			return h, nil
		}
	}
	return plumbing.ZeroHash, plumbing.ErrObjectNotFound
}

// Count returns the number of objects in the pack.
func (x *Index) Count() (int64, error) { return int64(x.count), nil }

// Entries iterates over the objects in name order.
func (x *Index) Entries() (idxfile.EntryIter, error) {
	return &entryIter{x: x}, nil
}

// EntriesByOffset iterates over the objects in offset order.
func (x *Index) EntriesByOffset() (idxfile.EntryIter, error) {
	rev, err := x.byOffset()
	if err != nil {
		return nil, err
	}
	return &entryIter{x: x, order: rev}, nil
}

type entryIter struct {
	x     *Index
	order []uint32 // nil: name order
	i     int
}

func (it *entryIter) Next() (e *idxfile.Entry, err error) {
	if it.x.mapped {
		defer recoverFault(&err, debug.SetPanicOnFault(true))
	}
	if it.i >= it.x.count {
		return nil, io.EOF
	}
	pos := it.i
	if it.order != nil {
		pos = int(it.order[it.i])
	}
	it.i++
	off, err := it.x.offset(pos)
	if err != nil {
		return nil, err
	}
	e = &idxfile.Entry{CRC32: binary.BigEndian.Uint32(it.x.data[it.x.crcs+4*pos:]), Offset: uint64(off)}
	copy(e.Hash[:], it.x.name(pos))
	return e, nil
}

func (it *entryIter) Close() error { it.i = it.x.count; return nil }

var _ idxfile.Index = (*Index)(nil)
