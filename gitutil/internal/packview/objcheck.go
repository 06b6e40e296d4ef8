package packview

import (
	"compress/zlib"
	"crypto/sha1"
	"errors"
	"fmt"
	"hash"
	"io"
	"strconv"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
)

// What the mirror hands out is checked against its name: an object read
// from a pack is the content its hash names (a whole object at once, a
// streamed one as it is read), and the delta chain that makes it is
// walked, headers only, before go-git resolves it, with a bound on its
// length. A pack whose trailing SHA-1 is right can still hold a wrong
// object (a buggy packer, a fault before the write): its checksum proves
// the bytes are those written, never that they are right.

// MaxDeltaChain bounds the delta chains read. git pack-objects clamps
// --depth to 4095 since 2.19; older packs, made with larger depths, are
// read up to this bound. A chain past it, or one that loops, is damage:
// go-git resolves chains by recursion, and one that loops exhausts the
// stack, which no recover catches.
const MaxDeltaChain = 10000

// MaxChecked bounds the entries of a pack remembered as checked.
const MaxChecked = 1 << 16

// ErrMismatch is an object whose content is not what its name is the
// hash of (or whose size is not its header's).
var ErrMismatch = errors.New("content does not hash to the object's name")

// errChain is a delta chain too long, circular, or leaving its pack.
var errChain = errors.New("malformed delta chain")

// ReadError is a failed read of Object in Pack: what a mirror's
// verification of its store reads again.
type ReadError struct {
	Pack   plumbing.Hash // zero for a loose object
	Object plumbing.Hash
	Err    error
}

func (e *ReadError) Error() string {
	if e.Pack.IsZero() {
		return fmt.Sprintf("object %s: %v", e.Object, e.Err)
	}
	return fmt.Sprintf("object %s in pack %s: %v", e.Object, e.Pack, e.Err)
}

// Unwrap returns the read's error.
func (e *ReadError) Unwrap() error { return e.Err }

// checkChain walks the delta chain of the entry at off in pack i, reading
// headers from f, and fails when it is longer than MaxDeltaChain, loops,
// or names a base outside the pack's entries; every delta's data, and
// the whole object at its end, must inflate to the size they say (the
// first entry, when it is whole, is read by its reader, bounded). Entries
// checked before are not walked again.
func (v *View) checkChain(i int, f io.ReaderAt, off int64) error {
	p := &v.packs[i]
	var walked []int64 // entries inflated
	for links := 0; links <= MaxDeltaChain; links++ {
		if p.checked.has(off) {
			break
		}
		h, data, err := readEntryHeader(f, off)
		if err != nil {
			return err
		}
		isDelta := h.Type == plumbing.OFSDeltaObject || h.Type == plumbing.REFDeltaObject
		if links == 0 && !isDelta {
			return nil // read whole by View.object, or streamed, bounded
		}
		if !isDelta && h.Length > maxDeltaBase {
			return fmt.Errorf("%w: a delta on an object of %d bytes, over %d", errChain, h.Length, maxDeltaBase)
		}
		if err := inflatesTo(f, data, h.Length, nil); err != nil {
			return err
		}
		walked = append(walked, off)
		switch h.Type {
		case plumbing.OFSDeltaObject:
			off = h.OffsetReference
		case plumbing.REFDeltaObject:
			base, err := p.idx.FindOffset(h.Reference)
			switch {
			case errors.Is(err, plumbing.ErrObjectNotFound):
				return nil // a base elsewhere: go-git's to find (and fail)
			case err != nil:
				return err
			}
			off = base
		default:
			v.markChecked(p, walked)
			return nil
		}
	}
	if len(walked) > MaxDeltaChain {
		return fmt.Errorf("%w: longer than %d links, or circular, from offset %d", errChain, MaxDeltaChain, walked[0])
	}
	v.markChecked(p, walked)
	return nil
}

// readWhole reads the whole object at off in pack i (its header h, its
// data at data) into memory, inflating no more than it says, and checks
// it against its name h.
func (v *View) readWhole(i int, f io.ReaderAt, name plumbing.Hash, h packfile.ObjectHeader, data int64) (plumbing.EncodedObject, error) {
	if o, ok := v.cache.Get(name); ok {
		if _, ok := v.sound[name]; ok {
			return o, nil
		}
	}
	// Inflated into a slice of its size, then written once: a
	// MemoryObject written piece by piece grows to twice what it holds,
	// and the cache counts what it holds.
	content := sliceWriter(make([]byte, 0, h.Length))
	if err := inflatesTo(f, data, h.Length, &content); err != nil {
		return nil, &ReadError{Pack: v.packs[i].hash, Object: name, Err: err}
	}
	mo := &plumbing.MemoryObject{}
	mo.SetType(h.Type)
	if _, err := mo.Write(content); err != nil {
		return nil, err
	}
	o, err := v.checked(i, name, mo)
	if err == nil {
		v.cache.Put(o)
	}
	return o, err
}

func (v *View) markChecked(p *viewPack, offs []int64) { p.checked.add(offs) }

// entrySet is the entries of a pack whose chains checkChain walked and
// found sound, shared by every view of the pack (a pack never changes:
// its name is its checksum), bounded by MaxChecked.
type entrySet struct {
	mu sync.Mutex
	m  map[int64]struct{}
}

func (s *entrySet) has(off int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[off]
	return ok
}

func (s *entrySet) add(offs []int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil || len(s.m)+len(offs) > MaxChecked {
		s.m = make(map[int64]struct{}, len(offs))
	}
	for _, o := range offs {
		s.m[o] = struct{}{}
	}
}

// entryHeaderMax is the most bytes a pack entry's header takes: type and
// size (up to 10 bytes), then an OFS_DELTA's offset (up to 10) or a
// REF_DELTA's base (20).
const entryHeaderMax = 32

// readEntryHeader reads the header of the pack entry at off: its type,
// the size it says (Length: the object's, or a delta's own data), an
// OFS_DELTA's base offset (after the pack's header, before the entry) or a
// REF_DELTA's base, and where its deflated data starts.
func readEntryHeader(f io.ReaderAt, off int64) (packfile.ObjectHeader, int64, error) {
	h := packfile.ObjectHeader{Offset: off}
	if off < packHeaderSize {
		return h, 0, fmt.Errorf("%w: an entry at offset %d, inside the pack's header", errChain, off)
	}
	var buf [entryHeaderMax]byte
	n, err := f.ReadAt(buf[:], off)
	if n == 0 && err != nil {
		return h, 0, fmt.Errorf("entry at offset %d: %w", off, err)
	}
	b := buf[:n]
	h.Type = plumbing.ObjectType((b[0] >> 4) & 7)
	h.Length = int64(b[0] & 0x0f)
	i, shift := 0, uint(4)
	for b[i]&0x80 != 0 {
		if i++; i >= len(b) || i > 8 {
			return h, 0, fmt.Errorf("%w: entry at offset %d: a size header that does not end", errChain, off)
		}
		h.Length |= int64(b[i]&0x7f) << shift
		shift += 7
	}
	b = b[i+1:]
	data := off + int64(i+1)
	switch h.Type {
	case plumbing.OFSDeltaObject:
		rel, used, ok := ofsDelta(b)
		if !ok || rel <= 0 || off-rel < packHeaderSize {
			return h, 0, fmt.Errorf("%w: entry at offset %d: a base outside the pack", errChain, off)
		}
		h.OffsetReference, data = off-rel, data+int64(used)
	case plumbing.REFDeltaObject:
		if len(b) < len(h.Reference) {
			return h, 0, fmt.Errorf("%w: entry at offset %d: a base name cut short", errChain, off)
		}
		copy(h.Reference[:], b)
		data += int64(len(h.Reference))
	}
	return h, data, nil
}

// inflatesTo checks that the deflated data at off in f inflates to size
// bytes exactly, inflating at most one more (a stream of a few bytes can
// inflate to gigabytes: go-git inflates an entry whole, unbounded), into
// w when it is not nil.
func inflatesTo(f io.ReaderAt, off, size int64, w io.Writer) error {
	zr, err := zlib.NewReader(io.NewSectionReader(f, off, 1<<62))
	if err != nil {
		return fmt.Errorf("entry data at offset %d: %w", off, err)
	}
	defer zr.Close()
	if w == nil {
		w = io.Discard
	}
	n, err := io.CopyN(w, zr, size+1)
	switch {
	case n > size:
		return fmt.Errorf("%w: the entry at offset %d inflates past the %d bytes it says", ErrMismatch, off, size)
	case !errors.Is(err, io.EOF):
		return fmt.Errorf("entry data at offset %d: %w", off, err)
	case n < size:
		return fmt.Errorf("%w: the entry at offset %d inflates to %d bytes, not the %d it says", ErrMismatch, off, n, size)
	}
	return nil
}

// maxDeltaBase bounds the size of an object a delta is made on: go-git
// reads a delta's base whole into memory. git makes no delta of a file
// past core.bigFileThreshold, 512 MiB by default.
const maxDeltaBase = 512 << 20

// packHeaderSize is the pack's signature, version and count.
const packHeaderSize = 12

// ofsDelta decodes an OFS_DELTA's base distance (git's offset encoding:
// each continuation adds one before the shift), and the bytes it took.
func ofsDelta(b []byte) (int64, int, bool) {
	if len(b) == 0 {
		return 0, 0, false
	}
	c := b[0]
	v := int64(c & 0x7f)
	i := 1
	for ; c&0x80 != 0; i++ {
		if i >= len(b) || i > 9 || v > (1<<55) {
			return 0, 0, false
		}
		c = b[i]
		v = ((v + 1) << 7) | int64(c&0x7f)
	}
	return v, i, true
}

// checkedObject is a streamed object of a pack: its reader hashes what it
// reads and fails, instead of ending, when the content is not h's.
type checkedObject struct {
	plumbing.EncodedObject
	pack plumbing.Hash
}

func (o *checkedObject) Reader() (io.ReadCloser, error) {
	r, err := o.EncodedObject.Reader()
	if err != nil {
		return nil, &ReadError{Pack: o.pack, Object: o.Hash(), Err: err}
	}
	return &hashingReader{r: r, o: o, left: o.Size(), sum: objectHasher(o.Type(), o.Size())}, nil
}

// objectHasher starts the hash of an object of type t and size (git's
// "<type> <size>\x00" header). It is crypto/sha1, not go-git's
// collision-detecting SHA-1: it checks for damage, not for an attack on
// SHA-1, and is several times faster.
func objectHasher(t plumbing.ObjectType, size int64) hash.Hash {
	h := sha1.New()
	var head [32]byte
	b := append(append(append(head[:0], t.Bytes()...), ' '), strconv.FormatInt(size, 10)...)
	h.Write(append(b, 0))
	return h
}

// hashingReader reads an object's content, hashing it; the read that
// reaches its size checks the hash, and a content that ends early or
// runs past its size is an error too.
type hashingReader struct {
	r    io.ReadCloser
	o    *checkedObject
	left int64
	sum  hash.Hash
	err  error
}

func (r *hashingReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if r.left == 0 {
		// The content was checked: more of it is a mismatch too.
		if n, _ := r.r.Read(p[:min(len(p), 1)]); n > 0 {
			return 0, r.fail(fmt.Errorf("%w: longer than its size", ErrMismatch))
		}
		return 0, io.EOF
	}
	n, err := r.r.Read(p[:min(int64(len(p)), r.left)])
	r.sum.Write(p[:n])
	r.left -= int64(n)
	switch {
	case r.left == 0 && plumbing.Hash(r.sum.Sum(nil)) != r.o.Hash():
		return 0, r.fail(ErrMismatch)
	case r.left > 0 && errors.Is(err, io.EOF):
		return n, r.fail(fmt.Errorf("%w: %d bytes short of its size", ErrMismatch, r.left))
	case err != nil && !errors.Is(err, io.EOF):
		return n, r.fail(err)
	}
	return n, nil
}

func (r *hashingReader) fail(err error) error {
	r.err = &ReadError{Pack: r.o.pack, Object: r.o.Hash(), Err: err}
	return r.err
}

func (r *hashingReader) Close() error { return r.r.Close() }

// sliceWriter appends what is written to it.
type sliceWriter []byte

func (w *sliceWriter) Write(p []byte) (int, error) {
	*w = append(*w, p...)
	return len(p), nil
}
