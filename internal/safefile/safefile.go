package safefile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
)

// Links says whether a path's last element may be a symbolic link.
type Links uint8

const (
	// NoFollow refuses a symbolic link ([ErrLink]): the library's own
	// files, which it never writes as links.
	NoFollow Links = iota
	// Follow follows links, to a regular file only: mounted Secrets and
	// ConfigMaps, files a user names.
	Follow
)

// ErrRefused is wrapped by every refusal: the file is there but damaged or
// hostile, as opposed to missing (fs.ErrNotExist).
var ErrRefused = errors.New("refused")

// The reasons of a refusal; each wraps [ErrRefused].
var (
	ErrLink       = fmt.Errorf("%w: a symbolic link where none is expected", ErrRefused)
	ErrNotRegular = fmt.Errorf("%w: not a regular file", ErrRefused)
	ErrNotDir     = fmt.Errorf("%w: not a directory", ErrRefused)
	ErrTooLarge   = fmt.Errorf("%w: too large", ErrRefused)
)

// chunk is how much ReadFile reads between two looks at its context.
const chunk = 64 << 10

// ReadFile returns the content of the regular file at path, of at most limit
// bytes. It refuses a link (unless links is [Follow]), anything but a
// regular file, and a file of more than limit bytes, without blocking on a
// named pipe and reading at most limit+1 bytes whatever the file's stated
// size. It stops with ctx's error (wrapped) once ctx is done.
func ReadFile(ctx context.Context, path string, limit int64, links Links) ([]byte, error) {
	if limit < 0 {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("a negative bound %d", limit)}
	}
	if err := ctx.Err(); err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	f, size, err := openRegular(path, links)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readAll(ctx, f, path, limit, size)
}

// readAll reads f to its end, refusing more than limit bytes; size, the
// file's stated size, only sizes the first buffer (up to 1 MiB).
func readAll(ctx context.Context, f *os.File, path string, limit, size int64) ([]byte, error) {
	out := make([]byte, 0, min(limit, max(size, 512), 1<<20)+1)
	for int64(len(out)) <= limit {
		if err := ctx.Err(); err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		want := chunk
		if left := limit - int64(len(out)); left < chunk {
			want = int(left) + 1 // the byte that tells a file of limit+1
		}
		out = slices.Grow(out, want)
		n, err := f.Read(out[len(out) : len(out)+want])
		out = out[:len(out)+n]
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err // an *fs.PathError naming path
		}
	}
	return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w: more than %d bytes", ErrTooLarge, limit)}
}

// Open opens the regular file at path for reading, with the checks of
// [ReadFile] but no bound: for files read in part or streamed (a pack).
// The caller closes it.
func Open(path string, links Links) (*os.File, error) {
	f, _, err := openRegular(path, links)
	return f, err
}

// OpenDir opens the directory at path (to sync it, or to list it),
// refusing anything else without blocking on it. The caller closes it.
func OpenDir(path string, links Links) (*os.File, error) {
	return openKind(path, links, fs.ModeDir)
}

// ReadDir lists the directory at path as os.ReadDir does (sorted by
// name), with the checks of [OpenDir].
func ReadDir(path string, links Links) ([]fs.DirEntry, error) {
	d, err := OpenDir(path, links)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	entries, err := d.ReadDir(-1)
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, err
}

func openRegular(path string, links Links) (*os.File, int64, error) {
	f, err := openKind(path, links, 0)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, fi.Size(), nil
}

// check refuses a file whose type is not want (0: regular, or
// fs.ModeDir), naming what it is.
func check(path string, mode fs.FileMode, want fs.FileMode) error {
	typ := mode.Type()
	if typ == want {
		return nil
	}
	reason := ErrNotRegular
	if want == fs.ModeDir {
		reason = ErrNotDir
	}
	if typ&fs.ModeSymlink != 0 {
		reason = ErrLink
	}
	return &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w (%s)", reason, kind(typ))}
}

// kind names a file type.
func kind(typ fs.FileMode) string {
	switch {
	case typ == 0:
		return "a regular file"
	case typ&fs.ModeDir != 0:
		return "a directory"
	case typ&fs.ModeSymlink != 0:
		return "a symbolic link"
	case typ&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case typ&fs.ModeSocket != 0:
		return "a socket"
	case typ&fs.ModeDevice != 0:
		return "a device"
	default:
		return "a file of type " + typ.String()
	}
}

// openKind opens path for reading when it is a file of type want, after
// a look at it (so that a device is not opened, which may act on it) and
// again on the open descriptor (in case it was swapped meanwhile).
func openKind(path string, links Links, want fs.FileMode) (*os.File, error) {
	look := os.Lstat
	if links == Follow {
		look = os.Stat
	}
	fi, err := look(path)
	if err != nil {
		return nil, err
	}
	if err := check(path, fi.Mode(), want); err != nil {
		return nil, err
	}
	return openChecked(path, links, want)
}

// openChecked opens path and refuses it unless the descriptor is of type
// want: what was looked at may have been swapped since.
func openChecked(path string, links Links, want fs.FileMode) (*os.File, error) {
	f, err := openFile(path, links)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil {
		err = check(path, fi.Mode(), want)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
