package cachedir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/gofrs/flock"

	"github.com/modwatch/modwatch/internal/safefile"
)

// ErrInUse is returned (wrapped) by Open when another watcher, in this
// process or another, holds the directory.
var ErrInUse = errors.New("watcher: cache directory is in use by another watcher")

// Dir is a watcher's cache directory while it runs: held by an exclusive
// lock, with a private temporary directory.
type Dir struct {
	dir string
	// Tmp is the private temporary directory, for the git CLI's
	// credential files.
	Tmp      string
	lock     *flock.Flock
	suffixes []string // of what a killed process left
}

// Open creates dir (mode 0700: mirrors hold private repositories), takes
// an exclusive lock on dir/.lock, and only then clears what a killed
// process may have left: the temporary directory (credential files of an
// interrupted clone), the mirrors it was removing (see Unused), and the
// entries whose names end with one of leftovers (half-made clones beside
// the mirrors). A second process on the same directory fails here instead
// of taking the first's live lock files for crash leftovers.
func Open(dir string, leftovers ...string) (*Dir, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("watcher: cache directory: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("watcher: cache directory: %w", err)
	}
	lock := flock.New(filepath.Join(dir, ".lock"), flock.SetPermissions(0o600), flock.SetFlag(lockFlag()))
	ok, err := lock.TryLock()
	if err == nil && ok {
		err = regularLock(lock)
	}
	if err != nil {
		return nil, fmt.Errorf("watcher: lock cache directory %s: %w", dir, err)
	}
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrInUse, dir)
	}
	c := &Dir{dir: dir, Tmp: filepath.Join(dir, ".tmp"), lock: lock, suffixes: append([]string{gcSuffix}, leftovers...)}
	if err := c.clearLeftovers(); err != nil {
		_ = lock.Unlock()
		return nil, err
	}
	return c, nil
}

// lockFlag is how the lock file is opened: created when missing, as
// flock's own default (read-only, read-write where a read-only file cannot
// be locked exclusively), and as a file of the watcher's own directory:
// a link there is not followed, a named pipe not waited on (that open
// would not return).
func lockFlag() int {
	mode := os.O_RDONLY
	switch runtime.GOOS {
	case "aix", "solaris", "illumos":
		mode = os.O_RDWR
	}
	return os.O_CREATE | mode | safefile.OpenFlags(safefile.NoFollow)
}

// regularLock releases lock, held, unless its file is a regular file:
// a named pipe or a device is not the watcher's lock.
func regularLock(lock *flock.Flock) error {
	fi, err := lock.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%w (%s)", safefile.ErrNotRegular, fi.Mode().Type())
	}
	if err != nil {
		_ = lock.Unlock()
	}
	return err
}

func (c *Dir) clearLeftovers() error {
	if err := os.RemoveAll(c.Tmp); err != nil {
		return fmt.Errorf("watcher: clear %s: %w", c.Tmp, err)
	}
	if err := os.Mkdir(c.Tmp, 0o700); err != nil {
		return fmt.Errorf("watcher: cache directory: %w", err)
	}
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return fmt.Errorf("watcher: cache directory: %w", err)
	}
	for _, e := range entries {
		if slices.ContainsFunc(c.suffixes, func(suffix string) bool { return strings.HasSuffix(e.Name(), suffix) }) {
			if err := os.RemoveAll(filepath.Join(c.dir, e.Name())); err != nil {
				return fmt.Errorf("watcher: clear %s: %w", e.Name(), err)
			}
		}
	}
	return nil
}

// Close releases the lock; the temporary directory is removed.
func (c *Dir) Close() {
	_ = os.RemoveAll(c.Tmp)
	_ = c.lock.Unlock()
}
