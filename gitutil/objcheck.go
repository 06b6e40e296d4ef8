package gitutil

import (
	"crypto/sha1"
	"errors"
	"fmt"
	"hash"
	"io"
	"strconv"

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

// maxDeltaChain bounds the delta chains read. git pack-objects clamps
// --depth to 4095 since 2.19; older packs, made with larger depths, are
// read up to this bound. A chain past it, or one that loops, is damage:
// go-git resolves chains by recursion, and one that loops exhausts the
// stack, which no recover catches.
const maxDeltaChain = 10000

// maxChecked bounds the pack entries a view remembers as checked.
const maxChecked = 1 << 16

// errMismatch is an object whose content is not what its name is the
// hash of (or whose size is not its header's).
var errMismatch = errors.New("content does not hash to the object's name")

// errChain is a delta chain too long, circular, or leaving its pack.
var errChain = errors.New("malformed delta chain")

// readError is a failed read of object in pack: what the store's
// verification reads again (see Mirror.verifyAfter).
type readError struct {
	pack   plumbing.Hash
	object plumbing.Hash
	err    error
}

func (e *readError) Error() string {
	if e.pack.IsZero() {
		return fmt.Sprintf("object %s: %v", e.object, e.err)
	}
	return fmt.Sprintf("object %s in pack %s: %v", e.object, e.pack, e.err)
}

func (e *readError) Unwrap() error { return e.err }

// checkChain walks the delta chain of the entry at off in pack i, reading
// headers from f, and fails when it is longer than maxDeltaChain, loops,
// or names a base outside the pack's entries. Entries checked before are
// not walked again.
func (v *packView) checkChain(i int, f io.ReaderAt, off int64) error {
	p := &v.packs[i]
	var walked []int64
	for len(walked) <= maxDeltaChain {
		if _, ok := p.checked[off]; ok {
			break
		}
		walked = append(walked, off)
		h, err := readEntryHeader(f, off)
		if err != nil {
			return err
		}
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
			off = -1
		}
		if off < 0 {
			v.markChecked(p, walked)
			return nil
		}
	}
	if len(walked) > maxDeltaChain {
		return fmt.Errorf("%w: longer than %d links, or circular, from offset %d", errChain, maxDeltaChain, walked[0])
	}
	v.markChecked(p, walked)
	return nil
}

func (v *packView) markChecked(p *viewPack, offs []int64) {
	if p.checked == nil || len(p.checked)+len(offs) > maxChecked {
		p.checked = make(map[int64]struct{}, len(offs))
	}
	for _, o := range offs {
		p.checked[o] = struct{}{}
	}
}

// entryHeaderMax is the most bytes a pack entry's header takes: type and
// size (up to 10 bytes), then an OFS_DELTA's offset (up to 10) or a
// REF_DELTA's base (20).
const entryHeaderMax = 32

// readEntryHeader reads the header of the pack entry at off: its type,
// and an OFS_DELTA's base offset (after the pack's header, before the
// entry) or a REF_DELTA's base.
func readEntryHeader(f io.ReaderAt, off int64) (packfile.ObjectHeader, error) {
	h := packfile.ObjectHeader{Offset: off}
	if off < packHeaderSize {
		return h, fmt.Errorf("%w: an entry at offset %d, inside the pack's header", errChain, off)
	}
	var buf [entryHeaderMax]byte
	n, err := f.ReadAt(buf[:], off)
	if n == 0 && err != nil {
		return h, fmt.Errorf("entry at offset %d: %w", off, err)
	}
	b := buf[:n]
	i := 0
	for ; i < len(b) && b[i]&0x80 != 0; i++ { // type and size
	}
	if i >= len(b) || i > 9 {
		return h, fmt.Errorf("%w: entry at offset %d: a size header that does not end", errChain, off)
	}
	h.Type = plumbing.ObjectType((b[0] >> 4) & 7)
	b = b[i+1:]
	switch h.Type {
	case plumbing.OFSDeltaObject:
		rel, ok := ofsDelta(b)
		if !ok || rel <= 0 || off-rel < packHeaderSize {
			return h, fmt.Errorf("%w: entry at offset %d: a base outside the pack", errChain, off)
		}
		h.OffsetReference = off - rel
	case plumbing.REFDeltaObject:
		if len(b) < len(h.Reference) {
			return h, fmt.Errorf("%w: entry at offset %d: a base name cut short", errChain, off)
		}
		copy(h.Reference[:], b)
	}
	return h, nil
}

// packHeaderSize is the pack's signature, version and count.
const packHeaderSize = 12

// ofsDelta decodes an OFS_DELTA's base distance (git's offset encoding:
// each continuation adds one before the shift).
func ofsDelta(b []byte) (int64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	c := b[0]
	v := int64(c & 0x7f)
	for i := 1; c&0x80 != 0; i++ {
		if i >= len(b) || i > 9 || v > (1<<55) {
			return 0, false
		}
		c = b[i]
		v = ((v + 1) << 7) | int64(c&0x7f)
	}
	return v, true
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
		return nil, &readError{pack: o.pack, object: o.Hash(), err: err}
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
			return 0, r.fail(fmt.Errorf("%w: longer than its size", errMismatch))
		}
		return 0, io.EOF
	}
	n, err := r.r.Read(p[:min(int64(len(p)), r.left)])
	r.sum.Write(p[:n])
	r.left -= int64(n)
	switch {
	case r.left == 0 && plumbing.Hash(r.sum.Sum(nil)) != r.o.Hash():
		return 0, r.fail(errMismatch)
	case r.left > 0 && errors.Is(err, io.EOF):
		return n, r.fail(fmt.Errorf("%w: %d bytes short of its size", errMismatch, r.left))
	case err != nil && !errors.Is(err, io.EOF):
		return n, r.fail(err)
	}
	return n, nil
}

func (r *hashingReader) fail(err error) error {
	r.err = &readError{pack: r.o.pack, object: r.o.Hash(), err: err}
	return r.err
}

func (r *hashingReader) Close() error { return r.r.Close() }
