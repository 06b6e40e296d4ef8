package mirror

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/modwatch/modwatch/gitutil/internal/packfmt"
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
		return errors.New("mirror: the mirror's store cannot take packs")
	}
	tmp, err := os.CreateTemp(filepath.Join(m.dir, "objects", "pack"), "tmp_thin_")
	if err != nil {
		return err
	}
	defer func() {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
	}()
	bases, err := packfmt.DeltaBases(io.TeeReader(r, tmp), maxThinBases)
	if err != nil {
		return fmt.Errorf("mirror: received pack: %w", err)
	}
	if _, err := io.Copy(tmp, r); err != nil { // nothing, after the checksum
		return err
	}
	size, err := tmp.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	if size < packfmt.HeaderSize+packfmt.TrailerSize {
		return fmt.Errorf("mirror: received pack: %d bytes", size)
	}
	// Bases inside the pack come as offsets (ofs-delta is asked for): a
	// base named by hash is one the server expects the mirror to hold.
	extra, err := m.thinBases(st, bases)
	if err != nil {
		return err
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
	if err := packfmt.AppendBases(w, tmp, size, extra); err != nil {
		return fmt.Errorf("mirror: %w", err)
	}
	return nil
}

// thinBases reads the delta bases a thin pack names outside itself (bases
// inside it come as offsets: ofs-delta is asked for) from the mirror; a
// partial mirror fetches one it lacks (the trees of history before its
// first fetch). Callers hold m.mu.
func (m *Mirror) thinBases(st *mirrorStore, bases []plumbing.Hash) ([]plumbing.EncodedObject, error) {
	var extra []plumbing.EncodedObject
	for _, h := range bases {
		o, err := st.objects.Object(h) // fetch work: not a tree read of a check
		if err != nil && m.partial {
			if err = m.lazyObject(h, err); err == nil {
				o, err = st.objects.Object(h)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("mirror: delta base %s of the received pack: %w", h, err)
		}
		extra = append(extra, o)
	}
	return extra, nil
}
