package watcher

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gofrs/flock"
)

// ErrCacheDirInUse is returned by Run when another watcher, in this process
// or another, holds the cache directory.
var ErrCacheDirInUse = errors.New("watcher: cache directory is in use by another watcher")

// cacheDir is a watcher's cache directory while it runs: held by an
// exclusive lock, with a private temporary directory.
type cacheDir struct {
	dir  string
	tmp  string // for the git CLI's credential files
	lock *flock.Flock
}

// openCacheDir creates dir (mode 0700: mirrors hold private repositories),
// takes an exclusive lock on dir/.lock, and only then clears what a killed
// process may have left: the temporary directory (credential files of an
// interrupted clone), half-made clones beside the mirrors and mirrors it
// was removing. A second
// process on the same directory fails here instead of taking the first's
// live lock files for crash leftovers.
func openCacheDir(dir string) (*cacheDir, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("watcher: cache directory: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("watcher: cache directory: %w", err)
	}
	lock := flock.New(filepath.Join(dir, ".lock"), flock.SetPermissions(0o600))
	ok, err := lock.TryLock()
	if err != nil {
		return nil, fmt.Errorf("watcher: lock cache directory %s: %w", dir, err)
	}
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrCacheDirInUse, dir)
	}
	c := &cacheDir{dir: dir, tmp: filepath.Join(dir, ".tmp"), lock: lock}
	if err := c.clearLeftovers(); err != nil {
		_ = lock.Unlock()
		return nil, err
	}
	return c, nil
}

func (c *cacheDir) clearLeftovers() error {
	if err := os.RemoveAll(c.tmp); err != nil {
		return fmt.Errorf("watcher: clear %s: %w", c.tmp, err)
	}
	if err := os.Mkdir(c.tmp, 0o700); err != nil {
		return fmt.Errorf("watcher: cache directory: %w", err)
	}
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return fmt.Errorf("watcher: cache directory: %w", err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".clone") || strings.HasSuffix(e.Name(), gcSuffix) {
			if err := os.RemoveAll(filepath.Join(c.dir, e.Name())); err != nil {
				return fmt.Errorf("watcher: clear %s: %w", e.Name(), err)
			}
		}
	}
	return nil
}

// close releases the lock; the temporary directory is left empty.
func (c *cacheDir) close() {
	_ = os.RemoveAll(c.tmp)
	_ = c.lock.Unlock()
}
