package mountfs

import (
	"errors"
	"io"
	"io/fs"
	"time"
)

// NewInfo describes a file that has no description of its own: its
// name, size, mode and modification time as given, and no Sys.
func NewInfo(name string, size int64, mode fs.FileMode, modTime time.Time) Info {
	return Info{name: name, size: size, mode: mode, modTime: modTime}
}

// Info is a description built by NewInfo, a value: held and handed on
// without an allocation of its own.
type Info struct {
	name    string
	size    int64
	mode    fs.FileMode
	modTime time.Time
}

func (i Info) Name() string       { return i.name }
func (i Info) Size() int64        { return i.size }
func (i Info) Mode() fs.FileMode  { return i.mode }
func (i Info) ModTime() time.Time { return i.modTime }
func (i Info) IsDir() bool        { return i.mode.IsDir() }
func (i Info) Sys() any           { return nil }

// NewDir is an open directory described by info whose entries are listed
// already: its ReadDir hands them out in order, Read fails.
func NewDir(info fs.FileInfo, entries []fs.DirEntry) fs.ReadDirFile {
	return &dirFile{info: info, entries: entries}
}

type dirFile struct {
	info    fs.FileInfo
	entries []fs.DirEntry
	off     int
}

func (d *dirFile) Stat() (fs.FileInfo, error) { return d.info, nil }
func (d *dirFile) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.info.Name(), Err: errors.New("is a directory")}
}
func (d *dirFile) Close() error { return nil }

func (d *dirFile) ReadDir(n int) ([]fs.DirEntry, error) {
	rest := d.entries[d.off:]
	if n <= 0 {
		d.off = len(d.entries)
		return rest, nil
	}
	if len(rest) == 0 {
		return nil, io.EOF
	}
	if n > len(rest) {
		n = len(rest)
	}
	d.off += n
	return rest[:n], nil
}
