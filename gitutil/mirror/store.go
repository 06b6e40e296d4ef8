package mirror

import (
	"time"

	"errors"
	"io"
	"maps"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/filesystem/dotgit"

	"github.com/modwatch/modwatch/gitutil/internal/leftovers"
	"github.com/modwatch/modwatch/gitutil/internal/packview"
)

// mirrorCacheIdle is how long a mirror's object cache keeps what it holds
// once nothing reads it: longer than a poll's work and the deliveries that
// follow it, shorter than the interval between polls.
const mirrorCacheIdle = 30 * time.Second

// mirrorStore is a mirror's store: go-git's for refs, configuration and
// what go-git's own repack iterates over, but its objects are read
// through the pack indexes the mirror shares with its file systems (see
// [packidx.Index]; go-git would decode every index again, and hold it), and a
// new pack is written without first decoding every index of the mirror,
// as go-git's PackfileWriter does. It counts the tree objects read (see
// [Mirror.TreesRead]).
type mirrorStore struct {
	*filesystem.Storage
	objects *packview.View
	// missing is called, by a reader that holds the mirror's lock, for an
	// object the store lacks: it fetches it into a partial mirror (nil:
	// read again), or returns the error to report.
	missing func(h plumbing.Hash, err error) error
}

// newMirrorStore opens the store of the mirror in m.dir, without the packs
// a repack replaced (kept on disk for the file systems that read them
// only: what a trim dropped is not the mirror's any more). Callers hold
// m.mu or own m.
func (m *Mirror) newMirrorStore() (*mirrorStore, error) {
	objects := packview.NewIdleCache(packview.NewObjectLRU(cache.DefaultMaxSize), mirrorCacheIdle)
	v, err := packview.New(m.dir, &m.indexes, maps.Clone(m.replaced), &m.treesRead, objects, true)
	if err != nil {
		return nil, err
	}
	return &mirrorStore{Storage: filesystem.NewStorageWithOptions(v.FS(), objects, filesystem.Options{}), objects: v, missing: m.lazyObject}, nil
}

// EncodedObject reads an object, counting trees; one a partial mirror
// lacks is fetched first.
func (s *mirrorStore) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	o, err := s.objects.EncodedObject(t, h)
	if err == nil || !errors.Is(err, plumbing.ErrObjectNotFound) || s.objects.HasEncodedObject(h) == nil {
		return o, err // found, or there but of another type
	}
	if err := s.missing(h, err); err != nil {
		return nil, err
	}
	return s.objects.EncodedObject(t, h)
}

// HasEncodedObject reports whether the mirror holds h.
func (s *mirrorStore) HasEncodedObject(h plumbing.Hash) error { return s.objects.HasEncodedObject(h) }

// EncodedObjectSize returns the size of object h.
func (s *mirrorStore) EncodedObjectSize(h plumbing.Hash) (int64, error) {
	return s.objects.EncodedObjectSize(h)
}

// PackfileWriter writes a pack and its index into the mirror; the next
// lookup of an object it holds finds it. A pack that fails leaves nothing
// (see leftovers.PackFS).
func (s *mirrorStore) PackfileWriter() (io.WriteCloser, error) {
	return newPackWriter(s.objects.FS(), s.objects)
}

// newPackWriter writes a pack into the mirror whose directory is fsys, and
// tells v of it.
func newPackWriter(fsys billy.Filesystem, v *packview.View) (io.WriteCloser, error) {
	fs := &leftovers.PackFS{Filesystem: fsys}
	w, err := dotgit.New(fs).NewObjectPack()
	if err != nil {
		fs.Undo()
		return nil, err
	}
	return packWriter{w, v, fs}, nil
}

// packWriter tells the store's view of the pack it wrote, and removes what
// a pack that failed left.
type packWriter struct {
	io.WriteCloser
	v  *packview.View
	fs *leftovers.PackFS
}

func (w packWriter) Close() error {
	defer w.v.Written() // even a failed pack may have been saved
	err := w.WriteCloser.Close()
	if err != nil {
		w.fs.Undo()
	}
	return err
}
