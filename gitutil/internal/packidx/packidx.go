// Package packidx reads a version 2 pack index in place, for the mirror's
// object store: the file is mapped where the system can, and checked
// against its size when opened. A mapped file can change under the mapping
// at any time after that (another process rewrites it, a disk fails), so it
// is untrusted input for its whole life: every value a lookup reads from it
// (a fanout entry, a position, an offset) is checked against the index's
// structure when it is read, and one that does not fit is an error of the
// lookup ([ErrCorrupt]), never a panic; a fault in the mapping (the file
// cut short under it) is one too ([ErrFault]), never a SIGBUS.
// It is go-git's idxfile.Index, without the decoding that holds about 60
// bytes per object.
package packidx

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
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
	large  int    // 8-byte offsets, for packs over 2 GiB
	end    uint64 // every offset is below: the pack's size less its trailer, where known
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

// The bounds of an offset: no object starts in the pack's header (its
// signature, version and count) or in its trailer (its checksum), nor past
// maxOffset in a pack whose size the index does not know.
const (
	packHeader  = 12
	packTrailer = 20
	maxOffset   = 1 << 62
)

// Open maps the index at path and checks that its structure fits
// its size (so that no lookup reads past it), that its fanout ascends and
// that it is the index of pack. The offsets it gives are within the pack
// beside it (pack-X.pack beside pack-X.idx), where there is one.
func Open(path string, pack plumbing.Hash) (*Index, error) {
	return openIndex(path, pack, MapThreshold)
}

// openIndex is Open, mapping an index of mapFrom bytes or more.
func openIndex(path string, pack plumbing.Hash, mapFrom int64) (*Index, error) {
	end, err := packEnd(path)
	if err != nil {
		return nil, err
	}
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
	if st.Size() >= mapFrom {
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
	idx.end = end
	runtime.AddCleanup(idx, func(unmap func() error) { _ = unmap() }, unmap)
	return idx, nil
}

// packEnd returns where the objects of the pack beside the index at path
// end: the pack's size less its trailer. Where there is no such pack, an
// offset is bounded by maxOffset only.
func packEnd(path string) (uint64, error) {
	base, ok := strings.CutSuffix(path, ".idx")
	if !ok {
		return maxOffset, nil
	}
	st, err := os.Stat(base + ".pack")
	if errors.Is(err, fs.ErrNotExist) {
		return maxOffset, nil
	}
	if err != nil {
		return 0, err
	}
	return uint64(max(st.Size()-packTrailer, packHeader)), nil
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

// ErrCorrupt is what a lookup gives when a value it reads from the index
// does not fit the index's structure: a fanout that decreases, or does not
// end at the object count the index was opened with; a name outside its
// fanout bucket, or out of order; an offset outside the pack, or past the
// table of 8-byte offsets. Open checked the structure, so the file changed
// since (rewritten in place under a mapping): like [ErrFault], an index the
// damage decision verifies, finds damaged, and rebuilds. It is never
// [plumbing.ErrObjectNotFound]: a corrupt index is not a miss.
var ErrCorrupt = fmt.Errorf("%w: corrupt index (its file changed after it was opened)", idxfile.ErrMalformedIdxFile)

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
	idx := &Index{data: data, count: int(count), large: int(large), end: maxOffset}
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

// bucket returns the positions [lo, hi) of the names that begin with b, as
// the fanout says when it is read: it must not decrease there, and must end
// at the object count the index was opened with (every position under
// that count is in the index, however the file changed).
func (x *Index) bucket(b byte) (lo, hi int, err error) {
	fanout := (*[FanoutSize]byte)(x.data[HeaderSize:])
	var l uint32
	if b > 0 {
		l = binary.BigEndian.Uint32(fanout[4*int(b)-4:])
	}
	h := binary.BigEndian.Uint32(fanout[4*int(b):])
	n := binary.BigEndian.Uint32(fanout[FanoutSize-4:])
	if l > h || h > n || n != uint32(x.count) {
		return 0, 0, fmt.Errorf("%w: fanout of %02x is %d..%d, of %d objects (%d when opened)", ErrCorrupt, b, l, h, n, x.count)
	}
	return int(l), int(h), nil
}

// name returns the name at pos, which must be under the count.
func (x *Index) name(pos int) []byte {
	at := x.names + 20*pos
	return x.data[at : at+20 : at+20]
}

// find returns the position of h, or -1. The search stays in the bucket
// the fanout gives, whatever the names there say, and every name it reads
// must begin as h does (as the fanout puts it).
func (x *Index) find(h *plumbing.Hash) (int, error) {
	lo, hi, err := x.bucket(h[0])
	if err != nil {
		return -1, err
	}
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		name := x.name(m)
		if first := name[0]; first != h[0] {
			return -1, fmt.Errorf("%w: name %d begins %02x, in the fanout's bucket of %02x", ErrCorrupt, m, first, h[0])
		}
		switch c := bytes.Compare(name, h[:]); {
		case c < 0:
			lo = m + 1
		case c > 0:
			hi = m
		default:
			return m, nil
		}
	}
	return -1, nil
}

// hashAt returns the name at pos (under the count), which must be in the
// fanout's bucket of its first byte.
func (x *Index) hashAt(pos int) (plumbing.Hash, error) {
	var h plumbing.Hash
	copy(h[:], x.name(pos))
	lo, hi, err := x.bucket(h[0])
	if err == nil && (pos < lo || pos >= hi) {
		err = fmt.Errorf("%w: name %d begins %02x, outside the fanout's bucket of it (%d..%d)", ErrCorrupt, pos, h[0], lo, hi)
	}
	if err != nil {
		return plumbing.ZeroHash, err
	}
	return h, nil
}

// offset returns the offset of the object at pos (under the count),
// through the table of 8-byte offsets where its 4-byte one says so: it must
// be in the pack, past its header and before its trailer.
func (x *Index) offset(pos int) (int64, error) {
	o := binary.BigEndian.Uint32(x.data[x.offsets+4*pos:])
	v := uint64(o)
	if o&(1<<31) != 0 {
		k := int(o &^ (1 << 31))
		if k >= x.large {
			return 0, fmt.Errorf("%w: object %d: 8-byte offset %d, past the %d of the index", ErrCorrupt, pos, k, x.large)
		}
		v = binary.BigEndian.Uint64(x.data[x.offsets64+8*k:])
	}
	if v < packHeader || v >= x.end {
		return 0, fmt.Errorf("%w: object %d at offset %d, outside the pack's objects (%d to %d)", ErrCorrupt, pos, v, packHeader, x.end)
	}
	return int64(v), nil
}

// crc returns the CRC32 of the object at pos (under the count).
func (x *Index) crc(pos int) uint32 { return binary.BigEndian.Uint32(x.data[x.crcs+4*pos:]) }

// Contains reports whether the pack holds h.
func (x *Index) Contains(h plumbing.Hash) (ok bool, err error) {
	if x.mapped {
		defer recoverFault(&err, debug.SetPanicOnFault(true))
	}
	pos, err := x.find(&h)
	return pos >= 0, err
}

// FindOffset returns the offset of h in the pack.
func (x *Index) FindOffset(h plumbing.Hash) (off int64, err error) {
	if x.mapped {
		defer recoverFault(&err, debug.SetPanicOnFault(true))
	}
	pos, err := x.find(&h)
	if err != nil {
		return 0, err
	}
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
	pos, err := x.find(&h)
	if err != nil {
		return 0, err
	}
	if pos < 0 {
		return 0, plumbing.ErrObjectNotFound
	}
	return x.crc(pos), nil
}

// byOffset returns the positions in offset order, made at the first call.
func (x *Index) byOffset() ([]uint32, error) {
	x.revOnce.Do(func() {
		if x.mapped {
			defer recoverFault(&x.revErr, debug.SetPanicOnFault(true))
		}
		x.rev, x.revErr = x.offsetOrder()
	})
	return x.rev, x.revErr
}

// offsetOrder reads every offset and returns the positions in offset
// order; two objects at one offset are corrupt.
func (x *Index) offsetOrder() ([]uint32, error) {
	offs := make([]int64, x.count)
	for pos := range offs {
		var err error
		if offs[pos], err = x.offset(pos); err != nil {
			return nil, err
		}
	}
	rev := make([]uint32, x.count)
	for i := range rev {
		rev[i] = uint32(i)
	}
	slices.SortFunc(rev, func(a, b uint32) int { return cmp.Compare(offs[a], offs[b]) })
	for i := 1; i < len(rev); i++ {
		if offs[rev[i]] == offs[rev[i-1]] {
			return nil, fmt.Errorf("%w: objects %d and %d both at offset %d", ErrCorrupt, rev[i-1], rev[i], offs[rev[i]])
		}
	}
	return rev, nil
}

// atOffset returns the position of the object at offset o, or -1, by a
// search of rev (the positions in offset order) that reads each offset
// again: it ends in bounds whatever they say now.
func (x *Index) atOffset(rev []uint32, o int64) (int, error) {
	lo, hi := 0, len(rev)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		off, err := x.offset(int(rev[m]))
		switch {
		case err != nil:
			return -1, err
		case off < o:
			lo = m + 1
		case off > o:
			hi = m
		default:
			return int(rev[m]), nil
		}
	}
	return -1, nil
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
	pos, err := x.atOffset(rev, o)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if pos < 0 {
		return plumbing.ZeroHash, plumbing.ErrObjectNotFound
	}
	return x.hashAt(pos)
}

// Count returns the number of objects in the pack: the count the index
// was opened with, which its fanout must still end at.
func (x *Index) Count() (n int64, err error) {
	if x.mapped {
		defer recoverFault(&err, debug.SetPanicOnFault(true))
	}
	if _, _, err := x.bucket(0xff); err != nil {
		return 0, err
	}
	return int64(x.count), nil
}

// Entries iterates over the objects in name order.
func (x *Index) Entries() (idxfile.EntryIter, error) {
	if _, err := x.Count(); err != nil {
		return nil, err
	}
	return &entryIter{x: x}, nil
}

// EntriesByOffset iterates over the objects in offset order.
func (x *Index) EntriesByOffset() (idxfile.EntryIter, error) {
	if _, err := x.Count(); err != nil {
		return nil, err
	}
	rev, err := x.byOffset()
	if err != nil {
		return nil, err
	}
	return &entryIter{x: x, order: rev}, nil
}

// entryIter iterates over the entries of an index; each entry must come
// after the one before it, in name order or offset order.
type entryIter struct {
	x     *Index
	order []uint32 // nil: name order
	i     int
	last  idxfile.Entry // the last entry read, if seen
	seen  bool
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
	if e, err = it.x.entry(pos); err != nil {
		return nil, err
	}
	if last := &it.last; it.seen && (it.order == nil && bytes.Compare(last.Hash[:], e.Hash[:]) >= 0 ||
		it.order != nil && last.Offset >= e.Offset) {
		return nil, fmt.Errorf("%w: entry %d (%s at %d) out of order after %s at %d", ErrCorrupt, pos, e.Hash, e.Offset, last.Hash, last.Offset)
	}
	it.last, it.seen = *e, true
	return e, nil
}

// entry reads the entry at pos (under the count).
func (x *Index) entry(pos int) (*idxfile.Entry, error) {
	off, err := x.offset(pos)
	if err != nil {
		return nil, err
	}
	h, err := x.hashAt(pos)
	if err != nil {
		return nil, err
	}
	return &idxfile.Entry{Hash: h, CRC32: x.crc(pos), Offset: uint64(off)}, nil
}

func (it *entryIter) Close() error { it.i = it.x.count; return nil }

var _ idxfile.Index = (*Index)(nil)
