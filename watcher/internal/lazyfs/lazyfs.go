package lazyfs

import (
	"io"
	"io/fs"
	"sync"
)

// FS is a file system opened at its first use.
type FS struct {
	open func() (fs.FS, error)

	mu   sync.Mutex
	fsys fs.FS // once opened
}

// New returns the file system open opens, at its first use.
func New(open func() (fs.FS, error)) *FS { return &FS{open: open} }

var (
	_ fs.ReadFileFS = (*FS)(nil)
	_ fs.ReadDirFS  = (*FS)(nil)
	_ fs.StatFS     = (*FS)(nil)
	_ fs.ReadLinkFS = (*FS)(nil)
)

// get opens the file system at the first call that needs it; a failed
// open is tried again at the next.
func (l *FS) get() (fs.FS, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fsys == nil {
		fsys, err := l.open()
		if err != nil {
			return nil, err
		}
		l.fsys = fsys
	}
	return l.fsys, nil
}

func (l *FS) do(op, name string, fn func(fs.FS) error) error {
	fsys, err := l.get()
	if err != nil {
		return &fs.PathError{Op: op, Path: name, Err: err}
	}
	return fn(fsys)
}

// Open implements fs.FS.
func (l *FS) Open(name string) (f fs.File, err error) {
	err = l.do("open", name, func(fsys fs.FS) error { f, err = fsys.Open(name); return err })
	return f, err
}

// ReadFile implements fs.ReadFileFS.
func (l *FS) ReadFile(name string) (data []byte, err error) {
	err = l.do("readfile", name, func(fsys fs.FS) error { data, err = fs.ReadFile(fsys, name); return err })
	return data, err
}

// ReadDir implements fs.ReadDirFS.
func (l *FS) ReadDir(name string) (entries []fs.DirEntry, err error) {
	err = l.do("readdir", name, func(fsys fs.FS) error { entries, err = fs.ReadDir(fsys, name); return err })
	return entries, err
}

// Stat implements fs.StatFS.
func (l *FS) Stat(name string) (fi fs.FileInfo, err error) {
	err = l.do("stat", name, func(fsys fs.FS) error { fi, err = fs.Stat(fsys, name); return err })
	return fi, err
}

// Lstat implements fs.ReadLinkFS.
func (l *FS) Lstat(name string) (fi fs.FileInfo, err error) {
	err = l.do("lstat", name, func(fsys fs.FS) error { fi, err = fs.Lstat(fsys, name); return err })
	return fi, err
}

// ReadLink implements fs.ReadLinkFS.
func (l *FS) ReadLink(name string) (target string, err error) {
	err = l.do("readlink", name, func(fsys fs.FS) error { target, err = fs.ReadLink(fsys, name); return err })
	return target, err
}

// Close closes the file system if it was opened and is an io.Closer.
func (l *FS) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c, ok := l.fsys.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
