package mirror

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"

	"github.com/modwatch/modwatch/gitutil/internal/packcheck"
	"github.com/modwatch/modwatch/gitutil/internal/packview"
	"github.com/modwatch/modwatch/internal/safefile"
)

// damage decides whether err, from an operation on the mirror, was caused
// by what is on disk, and returns why (nil: it was not). It is the one
// place that decides it; see judge.
func (m *Mirror) damage(err error) error {
	return judge(err, func() error { return m.verifyAfter(err) })
}

// verifyAfter is the verification that follows err. The pack a read
// failed in is verified whole again, as verified as it may look; then,
// should the store verify, the object is read again, on a view of its
// own, from the disk: the same failure twice is damage, whatever the
// pack's checksum says (a pack can be written wrong and summed right).
func (m *Mirror) verifyAfter(err error) error {
	var re *packview.ReadError
	if !errors.As(err, &re) {
		return m.verifyStore()
	}
	if !re.Pack.IsZero() {
		delete(m.verified, filepath.Join(m.dir, "objects", "pack", "pack-"+re.Pack.String()+".pack"))
	}
	if verr := m.verifyStore(); verr != nil {
		return verr
	}
	if rerr := m.reread(re.Object); rerr != nil {
		return fmt.Errorf("read again: %w", rerr)
	}
	return nil
}

// reread reads object h whole from a view of its own and returns what
// failed in its content (nil when it reads, or when the view cannot be
// opened: that says nothing of h). Callers hold m.mu.
func (m *Mirror) reread(h plumbing.Hash) error {
	v, err := packview.New(m.dir, &m.indexes, nil, new(atomic.Int64), packview.NewObjectLRU(cache.MiByte), false)
	if err != nil {
		return nil
	}
	defer v.Close()
	size, err := v.EncodedObjectSize(h)
	if err == nil {
		var o plumbing.EncodedObject
		if o, err = v.Object(h); err == nil {
			err = readWhole(o, size)
		}
	}
	var re *packview.ReadError
	if errors.As(err, &re) {
		return err
	}
	return nil
}

// readWhole reads o to its end, and fails if it has not size bytes.
func readWhole(o plumbing.EncodedObject, size int64) error {
	r, err := o.Reader()
	if err != nil {
		return err
	}
	defer r.Close()
	n, err := io.Copy(io.Discard, r)
	if err == nil && n != size {
		err = &packview.ReadError{Object: o.Hash(), Err: fmt.Errorf("%w: %d bytes, its header says %d", packview.ErrMismatch, n, size)}
	}
	return err
}

// judge is the damage decision, apart from the store it verifies:
//   - a stop (ctx), the remote's answer or the network's, and what is the
//     target's own (a ref that names a tree: [ErrNotCommit]; a commit the
//     mirror lacks; a selection, its budget or a path) are never damage,
//     and nothing is verified for them;
//   - an object that another object of the store names, and that no pack
//     and no loose object holds, is damage: the store is incomplete;
//   - anything else (a decompression or checksum error, a short read, an
//     I/O error, a fault reading a mapped index, a malformed index) is
//     damage when verify, the store's own verification, finds some, and
//     is not otherwise: rebuilding a store that verifies would change
//     nothing.
func judge(err error, verify func() error) error {
	switch {
	case err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		isRemoteError(err) || isNetworkError(err):
		return nil
	case errors.Is(err, ErrNotCommit) || errors.Is(err, ErrCommitNotFound) || errors.Is(err, ErrRebuilt) ||
		errors.Is(err, ErrInvalidSelection) || errors.Is(err, ErrPathNotFound) || errors.Is(err, ErrSymlinkEscape) ||
		errors.Is(err, ErrNotFetched) || errors.Is(err, ErrBadTree):
		return nil
	case errors.Is(err, plumbing.ErrObjectNotFound):
		return fmt.Errorf("an object the store names is missing: %w", err)
	}
	if verr := verify(); verr != nil {
		return fmt.Errorf("%w (verified after: %v)", verr, err)
	}
	return nil
}

// isNetworkError tells errors of a connection: what the remote or the
// network did, never the disk. (Not net.Error: a syscall.Errno, EIO
// included, is one.)
func isNetworkError(err error) bool {
	var oerr *net.OpError
	var derr *net.DNSError
	var uerr *url.Error
	return errors.As(err, &oerr) || errors.As(err, &derr) || errors.As(err, &uerr)
}

// fileStamp is what a verified file looked like: one whose size or
// modification time changed since (a byte written into it) is verified
// again.
type fileStamp struct {
	size  int64
	mtime time.Time
}

func stampOf(fi os.FileInfo) fileStamp { return fileStamp{fi.Size(), fi.ModTime()} }

// verifyStore is the store's own verification: every index whole and
// naming its pack (checkPacks), every pack's content matching the SHA-1
// it ends with, and every loose object inflating to the content its name
// is the hash of. Files verified before and unchanged since are not read
// again, so that an error that is not damage, repeated, costs a listing.
// Callers hold m.mu.
func (m *Mirror) verifyStore() error {
	if err := packcheck.Packs(m.dir, true); err != nil {
		return err
	}
	if m.verified == nil {
		m.verified = map[string]fileStamp{}
	}
	packDir := filepath.Join(m.dir, "objects", "pack")
	for name := range packNames(m.dir) {
		p := filepath.Join(packDir, name+".pack")
		if err := m.verifyOnce(p, packcheck.PackSum); err != nil {
			return fmt.Errorf("pack %s: %w", name, err)
		}
	}
	objects := filepath.Join(m.dir, "objects")
	dirs, err := os.ReadDir(objects)
	if err != nil {
		return fmt.Errorf("read %s: %w", objects, err)
	}
	for _, d := range dirs {
		if !d.IsDir() || len(d.Name()) != 2 {
			continue
		}
		files, err := os.ReadDir(filepath.Join(objects, d.Name()))
		if err != nil {
			return fmt.Errorf("read %s: %w", d.Name(), err)
		}
		for _, f := range files {
			h := d.Name() + f.Name()
			if !plumbing.IsHash(h) {
				continue
			}
			verify := func(file *os.File) error { return packcheck.Loose(file, plumbing.NewHash(h)) }
			if err := m.verifyOnce(filepath.Join(objects, d.Name(), f.Name()), verify); err != nil {
				return fmt.Errorf("loose object %s: %w", h, err)
			}
		}
	}
	return nil
}

// verifyOnce verifies the file at path with check, unless it was verified
// as it is now.
func (m *Mirror) verifyOnce(path string, check func(*os.File) error) error {
	f, err := safefile.Open(path, safefile.NoFollow)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if m.verified[path] == stampOf(fi) {
		return nil
	}
	if err := check(f); err != nil {
		delete(m.verified, path)
		return err
	}
	m.verified[path] = stampOf(fi)
	return nil
}
