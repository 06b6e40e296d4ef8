// Package packfmt writes and reads the parts of git's pack format that the
// mirror's thin-pack handling needs: the bases a pack's deltas name by
// hash, an object written whole as a pack entry, and a pack with bases
// appended (what git index-pack --fix-thin does).
package packfmt

import (
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
)

// A pack's header (signature, version, object count) and trailer (the
// SHA-1 of what precedes it).
const HeaderSize, TrailerSize = 12, 20

// AppendBases writes to w the pack of size bytes in pack with extra
// appended, whole: the count in its header raised, the objects after its
// own, and the trailer computed again (git index-pack --fix-thin).
func AppendBases(w io.Writer, pack io.ReaderAt, size int64, extra []plumbing.EncodedObject) error {
	sum := sha1.New()
	out := io.MultiWriter(w, sum)
	var head [HeaderSize]byte
	if _, err := pack.ReadAt(head[:], 0); err != nil {
		return err
	}
	count := binary.BigEndian.Uint32(head[8:])
	binary.BigEndian.PutUint32(head[8:], count+uint32(len(extra)))
	if _, err := out.Write(head[:]); err != nil {
		return err
	}
	if _, err := io.Copy(out, io.NewSectionReader(pack, HeaderSize, size-HeaderSize-TrailerSize)); err != nil {
		return err
	}
	for _, o := range extra {
		if err := WriteEntry(out, o); err != nil {
			return fmt.Errorf("delta base %s: %w", o.Hash(), err)
		}
	}
	_, err := w.Write(sum.Sum(nil))
	return err
}

// DeltaBases reads a pack and returns the bases its deltas name by hash,
// once each, at most limit of them.
func DeltaBases(r io.Reader, limit int) ([]plumbing.Hash, error) {
	sc := packfile.NewScanner(r)
	_, count, err := sc.Header()
	if err != nil {
		return nil, err
	}
	var bases []plumbing.Hash
	seen := map[plumbing.Hash]bool{}
	for range count {
		oh, err := sc.NextObjectHeader()
		if err != nil {
			return nil, err
		}
		if oh.Type == plumbing.REFDeltaObject && !seen[oh.Reference] {
			if len(bases) == limit {
				return nil, fmt.Errorf("more than %d delta bases outside the pack", limit)
			}
			seen[oh.Reference] = true
			bases = append(bases, oh.Reference)
		}
		if _, _, err := sc.NextObject(io.Discard); err != nil {
			return nil, err
		}
	}
	if _, err := sc.Checksum(); err != nil {
		return nil, err
	}
	return bases, nil
}

// storeLimit is the size up to which a base appended to a thin pack is
// stored rather than deflated.
const storeLimit = 1 << 20

// WriteEntry writes o whole (not as a delta) as a pack entry: its type
// and size, then its content deflated.
func WriteEntry(w io.Writer, o plumbing.EncodedObject) error {
	switch o.Type() {
	case plumbing.CommitObject, plumbing.TreeObject, plumbing.BlobObject, plumbing.TagObject:
	default:
		return fmt.Errorf("object of type %s", o.Type())
	}
	size := o.Size()
	hdr := []byte{byte(o.Type())<<4 | byte(size&0x0f)}
	for size >>= 4; size > 0; size >>= 7 {
		hdr[len(hdr)-1] |= 0x80
		hdr = append(hdr, byte(size&0x7f))
	}
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	r, err := o.Reader()
	if err != nil {
		return err
	}
	defer r.Close()
	// Stored, not deflated, up to a size: deflating a base and inflating
	// it again to index the pack is most of the time of a fetch of one
	// commit; the next repack deflates it.
	level := zlib.NoCompression
	if o.Size() > storeLimit {
		level = zlib.BestSpeed
	}
	z, err := zlib.NewWriterLevel(w, level)
	if err != nil {
		return err
	}
	if n, err := io.Copy(z, r); err != nil {
		return err
	} else if n != o.Size() {
		return fmt.Errorf("read %d bytes of %d", n, o.Size())
	}
	return z.Close()
}
