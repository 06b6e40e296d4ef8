package packview

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-billy/v5/osfs"
)

// ownFS is the mirror's directory as go-git reads it (its configuration,
// HEAD, refs, packed-refs, shallow, packs): a file go-git opens there
// that is not a regular file (a named pipe, a device, a link: nothing of
// a mirror is one) is refused before it is opened, so that no open waits
// on a pipe's writer, nor reads a device, nor leaves the directory. (An
// open that makes a file makes a regular one.)
type ownFS struct{ billy.Filesystem }

func newOwnFS(dir string) billy.Filesystem { return ownFS{osfs.New(dir)} }

// errNotOwnFile is a file of the mirror's that is not a regular file.
var errNotOwnFile = errors.New("not a regular file")

func (f ownFS) check(name string) error {
	fi, err := f.Filesystem.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case !fi.Mode().IsRegular():
		return &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("%w: %s", errNotOwnFile, fi.Mode().Type())}
	}
	return nil
}

func (f ownFS) Open(name string) (billy.File, error) {
	if err := f.check(name); err != nil {
		return nil, err
	}
	return f.Filesystem.OpenFile(name, os.O_RDONLY|nonBlock, 0)
}

func (f ownFS) OpenFile(name string, flag int, perm os.FileMode) (billy.File, error) {
	if err := f.check(name); err != nil {
		return nil, err
	}
	return f.Filesystem.OpenFile(name, flag|nonBlock, perm)
}

// Chroot keeps the check in what go-git makes of a subdirectory.
func (f ownFS) Chroot(path string) (billy.Filesystem, error) {
	sub, err := f.Filesystem.Chroot(path)
	if err != nil {
		return nil, err
	}
	return ownFS{sub}, nil
}
