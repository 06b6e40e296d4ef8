package gitutil

import (
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
)

// maxThinBases bounds the objects a thin pack may name as delta bases
// outside itself: each is read from the mirror and written into the pack.
const maxThinBases = 1 << 16

// storeThinPack stores a pack that may be thin: its deltas may have bases
// the mirror holds but the pack does not (a server sends those when the
// fetch offers thin-pack, which on a large directory turns a changed tree
// of hundreds of kilobytes into a delta of a few hundred bytes). A pack on
// disk must hold its bases, so they are appended to it before it is
// indexed, as git's index-pack --fix-thin does. The pack is staged in the
// mirror's pack directory (a leftover is cleared at the next open).
// Callers hold m.mu.
func (m *Mirror) storeThinPack(r io.Reader) (err error) {
	st, ok := m.repo.Storer.(*mirrorStore)
	if !ok {
		return errors.New("gitutil: the mirror's store cannot take packs")
	}
	tmp, err := os.CreateTemp(filepath.Join(m.dir, "objects", "pack"), "tmp_thin_")
	if err != nil {
		return err
	}
	defer func() {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
	}()
	bases, err := refBases(io.TeeReader(r, tmp))
	if err != nil {
		return fmt.Errorf("gitutil: received pack: %w", err)
	}
	if _, err := io.Copy(tmp, r); err != nil { // nothing, after the checksum
		return err
	}
	size, err := tmp.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	if size < packHeader+packTrailer {
		return fmt.Errorf("gitutil: received pack: %d bytes", size)
	}
	// Bases inside the pack come as offsets (ofs-delta is asked for): a
	// base named by hash is one the server expects the mirror to hold.
	var extra []plumbing.EncodedObject
	for _, h := range bases {
		o, err := st.objects.object(h) // fetch work: not a tree read of a check
		if err != nil {
			return fmt.Errorf("gitutil: delta base %s of the received pack: %w", h, err)
		}
		extra = append(extra, o)
	}
	w, err := st.PackfileWriter()
	if err != nil {
		return err
	}
	defer func() {
		if cerr := w.Close(); err == nil {
			err = cerr
		}
	}()
	if len(extra) == 0 {
		_, err = io.Copy(w, io.NewSectionReader(tmp, 0, size))
		return err
	}
	return fixThin(w, tmp, size, extra)
}

// A pack's header (signature, version, object count) and trailer (the
// SHA-1 of what precedes it).
const packHeader, packTrailer = 12, 20

// fixThin writes to w the pack of size bytes in tmp with extra appended:
// the count in its header raised, the objects after its own, and the
// trailer computed again.
func fixThin(w io.Writer, tmp *os.File, size int64, extra []plumbing.EncodedObject) error {
	sum := sha1.New()
	out := io.MultiWriter(w, sum)
	var head [packHeader]byte
	if _, err := tmp.ReadAt(head[:], 0); err != nil {
		return err
	}
	count := binary.BigEndian.Uint32(head[8:])
	binary.BigEndian.PutUint32(head[8:], count+uint32(len(extra)))
	if _, err := out.Write(head[:]); err != nil {
		return err
	}
	if _, err := io.Copy(out, io.NewSectionReader(tmp, packHeader, size-packHeader-packTrailer)); err != nil {
		return err
	}
	for _, o := range extra {
		if err := writePackEntry(out, o); err != nil {
			return fmt.Errorf("gitutil: delta base %s: %w", o.Hash(), err)
		}
	}
	_, err := w.Write(sum.Sum(nil))
	return err
}

// refBases reads a pack and returns the bases its deltas name by hash,
// once each.
func refBases(r io.Reader) ([]plumbing.Hash, error) {
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
			if len(bases) == maxThinBases {
				return nil, fmt.Errorf("more than %d delta bases outside the pack", maxThinBases)
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

// writePackEntry writes o whole (not as a delta) as a pack entry: its type
// and size, then its content deflated.
func writePackEntry(w io.Writer, o plumbing.EncodedObject) error {
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
