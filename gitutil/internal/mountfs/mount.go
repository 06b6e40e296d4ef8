package mountfs

import (
	"errors"
	"io"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strings"
	"time"
)

// Mount puts file systems into base at directories, as a checkout puts
// submodules into the superproject's tree: a name at or under a mount
// point is read from the mounted file system, and each mount point is a
// directory of its parent. Mount points are slash-separated paths
// relative to base's root; a mount point inside another is read from the
// outer one's file system, so nested submodules mount into their parent's.
// Nothing crosses a mount point: a symlink is followed within its own file
// system only. The result implements fs.ReadDirFS, fs.ReadFileFS,
// fs.StatFS and fs.ReadLinkFS, as far as the file systems it joins do, and
// io.Closer (closing them all).
func Mount(base fs.FS, mounts map[string]fs.FS) fs.FS {
	m := &mounted{base: base, mounts: map[string]fs.FS{}}
	for p, f := range mounts {
		m.mounts[path.Clean(p)] = f
		m.points = append(m.points, path.Clean(p))
	}
	// Longest first: a nested mount wins over its parent's.
	sort.Slice(m.points, func(i, j int) bool { return len(m.points[i]) > len(m.points[j]) })
	return m
}

type mounted struct {
	base   fs.FS
	mounts map[string]fs.FS
	points []string
}

var (
	_ fs.ReadDirFS  = (*mounted)(nil)
	_ fs.ReadFileFS = (*mounted)(nil)
	_ fs.StatFS     = (*mounted)(nil)
	_ fs.ReadLinkFS = (*mounted)(nil)
)

// route returns the file system name is read from, and its name there.
func (m *mounted) route(op, name string) (fs.FS, string, error) {
	if !fs.ValidPath(name) {
		return nil, "", &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	for _, p := range m.points {
		if name == p {
			return m.mounts[p], ".", nil
		}
		if rest, ok := strings.CutPrefix(name, p+"/"); ok {
			return m.mounts[p], rest, nil
		}
	}
	return m.base, name, nil
}

// children are the mount points directly in dir.
func (m *mounted) children(dir string) []string {
	var out []string
	for _, p := range m.points {
		parent := path.Dir(p)
		if parent == dir {
			out = append(out, path.Base(p))
		}
	}
	return out
}

func (m *mounted) Open(name string) (fs.File, error) {
	f, rel, err := m.route("open", name)
	if err != nil {
		return nil, err
	}
	file, err := f.Open(rel)
	if err != nil {
		return nil, rebase(err, name)
	}
	if len(m.children(name)) == 0 {
		if rel == "." && name != "." {
			return renamedFile{file, path.Base(name)}, nil // a mount's root, seen from its parent
		}
		return file, nil
	}
	// A directory holding mount points lists them too.
	defer file.Close()
	entries, err := m.ReadDir(name)
	if err != nil {
		return nil, err
	}
	info, err := file.Stat()
	if err != nil {
		return nil, rebase(err, name)
	}
	return NewDir(NewInfo(path.Base(name), 0, info.Mode(), info.ModTime()), entries), nil
}

// renamedFile is a mount's root opened from its parent.
type renamedFile struct {
	fs.File
	name string
}

func (f renamedFile) Stat() (fs.FileInfo, error) {
	info, err := f.File.Stat()
	if err != nil {
		return nil, err
	}
	return renamed{info, f.name}, nil
}

func (f renamedFile) ReadDir(n int) ([]fs.DirEntry, error) {
	d, ok := f.File.(fs.ReadDirFile)
	if !ok {
		return nil, &fs.PathError{Op: "readdir", Path: f.name, Err: errors.New("not a directory")}
	}
	return d.ReadDir(n)
}

func (m *mounted) ReadFile(name string) ([]byte, error) {
	f, rel, err := m.route("readfile", name)
	if err != nil {
		return nil, err
	}
	data, err := fs.ReadFile(f, rel)
	return data, rebase(err, name)
}

func (m *mounted) ReadDir(name string) ([]fs.DirEntry, error) {
	f, rel, err := m.route("readdir", name)
	if err != nil {
		return nil, err
	}
	entries, err := fs.ReadDir(f, rel)
	if err != nil {
		return nil, rebase(err, name)
	}
	for _, c := range m.children(name) {
		info, err := fs.Stat(m.mounts[path.Join(name, c)], ".")
		if err != nil {
			return nil, rebase(err, path.Join(name, c))
		}
		entries = slices.DeleteFunc(entries, func(e fs.DirEntry) bool { return e.Name() == c })
		entries = append(entries, fs.FileInfoToDirEntry(renamed{info, c}))
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	return entries, nil
}

func (m *mounted) Stat(name string) (fs.FileInfo, error) { return m.stat("stat", name, fs.Stat) }

func (m *mounted) Lstat(name string) (fs.FileInfo, error) { return m.stat("lstat", name, fs.Lstat) }

// stat is Stat or Lstat (by stat) in the file system name is read from; a
// mount's root is named as its mount point.
func (m *mounted) stat(op, name string, stat func(fs.FS, string) (fs.FileInfo, error)) (fs.FileInfo, error) {
	f, rel, err := m.route(op, name)
	if err != nil {
		return nil, err
	}
	info, err := stat(f, rel)
	if err != nil {
		return nil, rebase(err, name)
	}
	if rel == "." && name != "." {
		return renamed{info, path.Base(name)}, nil
	}
	return info, nil
}

func (m *mounted) ReadLink(name string) (string, error) {
	f, rel, err := m.route("readlink", name)
	if err != nil {
		return "", err
	}
	target, err := fs.ReadLink(f, rel)
	return target, rebase(err, name)
}

// Joined returns the file systems fsys joins, its base first, when it is
// one that Mount made; nil when it is not.
func Joined(fsys fs.FS) []fs.FS {
	m, ok := fsys.(*mounted)
	if !ok {
		return nil
	}
	return append([]fs.FS{m.base}, mapValues(m.mounts)...)
}

// Close closes the base and every mounted file system that can be.
func (m *mounted) Close() error {
	var errs []error
	for _, f := range Joined(m) {
		if c, ok := f.(io.Closer); ok {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}

func mapValues(m map[string]fs.FS) []fs.FS {
	out := make([]fs.FS, 0, len(m))
	for _, f := range m {
		out = append(out, f)
	}
	return out
}

// rebase names the path as the caller gave it in a *fs.PathError.
func rebase(err error, name string) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return &fs.PathError{Op: pe.Op, Path: name, Err: pe.Err}
	}
	return err
}

// renamed is a mount's root seen from its parent, under its mount name.
type renamed struct {
	fs.FileInfo
	name string
}

func (r renamed) Name() string       { return r.name }
func (r renamed) ModTime() time.Time { return r.FileInfo.ModTime() }
