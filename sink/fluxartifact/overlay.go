package fluxartifact

import (
	"errors"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"
)

// overlay is a tree with others put into it, as renames into a checkout
// put them (see put): a name at or under a point put is read from what
// was put there; a directory made on the way to one holds only what is
// put in it.
type overlay struct {
	base   fs.FS
	points map[string]graft // by the path put at
	made   map[string]bool  // directories made on the way to a point
	// kids are the points and directories made, by their parent.
	kids map[string]map[string]bool
}

// graft is what is at a point: name in fsys.
type graft struct {
	fsys fs.FS
	name string
}

func newOverlay(base fs.FS) *overlay {
	return &overlay{base: base, points: map[string]graft{}, made: map[string]bool{}, kids: map[string]map[string]bool{}}
}

var (
	_ fs.ReadDirFS = (*overlay)(nil)
	_ fs.StatFS    = (*overlay)(nil)
)

// Errors of put, as a rename says them.
var (
	errNotDir = errors.New("not a directory")
	errIsDir  = errors.New("is a directory")
	errLink   = errors.New("a symbolic link (not followed here)")
)

// put puts from, of fsys, at to, as source-controller's os.Rename puts
// it there: the directories on the way are made; a file at to is
// replaced by a file; a directory at to, empty or not, is never replaced
// (Go's os.Rename fails with "file exists" there); anything else fails.
// A symbolic link on the way or at to is refused (source-controller's
// securejoin would follow it, inside the checkout). A checkout's root,
// and its .git, are directories.
func (o *overlay) put(fsys fs.FS, from, to string) error {
	src, err := fs.Stat(fsys, from)
	if err != nil {
		return err
	}
	if to == "." || to == ".git" {
		return &fs.PathError{Op: "rename", Path: to, Err: fs.ErrExist}
	}
	elems := strings.Split(to, "/")
	var made []string
	for i := 1; i < len(elems); i++ {
		dir := strings.Join(elems[:i], "/")
		fi, err := o.lstat(dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			made = append(made, dir)
		case err != nil:
			return err
		case fi.Mode()&fs.ModeSymlink != 0:
			return &fs.PathError{Op: "mkdir", Path: dir, Err: errLink}
		case !fi.IsDir():
			return &fs.PathError{Op: "mkdir", Path: dir, Err: errNotDir}
		}
	}
	if err := o.replaceable(to, src.IsDir()); err != nil {
		return err
	}
	for _, d := range made {
		o.made[d] = true
		o.kid(d)
	}
	o.points[to] = graft{fsys, from}
	o.kid(to)
	return nil
}

// kid records p in its parent's kids.
func (o *overlay) kid(p string) {
	parent := path.Dir(p)
	if o.kids[parent] == nil {
		o.kids[parent] = map[string]bool{}
	}
	o.kids[parent][p] = true
}

// replaceable says whether a rename of a directory (or a file) may
// replace what is at to: only a file by a file.
func (o *overlay) replaceable(to string, dir bool) error {
	fi, err := o.lstat(to)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.Mode()&fs.ModeSymlink != 0:
		return &fs.PathError{Op: "rename", Path: to, Err: errLink}
	case fi.IsDir():
		return &fs.PathError{Op: "rename", Path: to, Err: fs.ErrExist}
	case dir:
		return &fs.PathError{Op: "rename", Path: to, Err: errNotDir}
	}
	return nil
}

// route is where name is read: a directory made (fsys nil), or a name
// of a file system.
func (o *overlay) route(op, name string) (fsys fs.FS, rel string, err error) {
	if !fs.ValidPath(name) {
		return nil, "", &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	if o.made[name] {
		return nil, "", nil
	}
	for p := name; ; p = path.Dir(p) {
		if g, ok := o.points[p]; ok {
			rest := strings.TrimPrefix(strings.TrimPrefix(name, p), "/")
			return g.fsys, path.Join(g.name, rest), nil
		}
		if p == "." {
			return o.base, name, nil
		}
	}
}

// children are the points and the directories made directly in dir.
func (o *overlay) children(dir string) []string {
	var out []string
	for p := range o.kids[dir] {
		out = append(out, p)
	}
	return out
}

func (o *overlay) lstat(name string) (fs.FileInfo, error) {
	fsys, rel, err := o.route("lstat", name)
	if err != nil {
		return nil, err
	}
	if fsys == nil {
		return madeDir(path.Base(name)), nil
	}
	fi, err := fs.Lstat(fsys, rel)
	if err != nil {
		return nil, err
	}
	return named{fi, path.Base(name)}, nil
}

func (o *overlay) Stat(name string) (fs.FileInfo, error) {
	fsys, rel, err := o.route("stat", name)
	if err != nil {
		return nil, err
	}
	if fsys == nil {
		return madeDir(path.Base(name)), nil
	}
	fi, err := fs.Stat(fsys, rel)
	if err != nil {
		return nil, err
	}
	return named{fi, path.Base(name)}, nil
}

func (o *overlay) ReadDir(name string) ([]fs.DirEntry, error) {
	fsys, rel, err := o.route("readdir", name)
	if err != nil {
		return nil, err
	}
	var entries []fs.DirEntry
	if fsys != nil {
		if entries, err = fs.ReadDir(fsys, rel); err != nil {
			return nil, err
		}
	}
	for _, c := range o.children(name) {
		fi, err := o.lstat(c)
		if err != nil {
			return nil, err
		}
		base := path.Base(c)
		entries = slices.DeleteFunc(entries, func(e fs.DirEntry) bool { return e.Name() == base })
		entries = append(entries, fs.FileInfoToDirEntry(fi))
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, nil
}

func (o *overlay) Open(name string) (fs.File, error) {
	fsys, rel, err := o.route("open", name)
	if err != nil {
		return nil, err
	}
	if fsys != nil {
		fi, err := fs.Stat(fsys, rel)
		if err != nil {
			return nil, err
		}
		if !fi.IsDir() {
			f, err := fsys.Open(rel)
			if err != nil {
				return nil, err
			}
			return namedFile{f, path.Base(name)}, nil
		}
	}
	entries, err := o.ReadDir(name)
	if err != nil {
		return nil, err
	}
	info, err := o.Stat(name)
	if err != nil {
		return nil, err
	}
	return &dirFile{info: info, entries: entries}, nil
}

// named is a file's description under the name it has in the overlay.
type named struct {
	fs.FileInfo
	name string
}

func (n named) Name() string { return n.name }

// namedFile is an open file under the name it has in the overlay.
type namedFile struct {
	fs.File
	name string
}

func (f namedFile) Stat() (fs.FileInfo, error) {
	fi, err := f.File.Stat()
	if err != nil {
		return nil, err
	}
	return named{fi, f.name}, nil
}

// madeDir describes a directory made on the way to a point.
type madeDir string

func (d madeDir) Name() string       { return string(d) }
func (d madeDir) Size() int64        { return 0 }
func (d madeDir) Mode() fs.FileMode  { return fs.ModeDir | 0o755 }
func (d madeDir) ModTime() time.Time { return time.Time{} }
func (d madeDir) IsDir() bool        { return true }
func (d madeDir) Sys() any           { return nil }

// dirFile is an open directory of the overlay.
type dirFile struct {
	info    fs.FileInfo
	entries []fs.DirEntry
}

func (d *dirFile) Stat() (fs.FileInfo, error) { return d.info, nil }
func (d *dirFile) Close() error               { return nil }
func (d *dirFile) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.info.Name(), Err: errIsDir}
}

func (d *dirFile) ReadDir(n int) ([]fs.DirEntry, error) {
	if n <= 0 {
		out := d.entries
		d.entries = nil
		return out, nil
	}
	if len(d.entries) == 0 {
		return nil, io.EOF
	}
	k := min(n, len(d.entries))
	out := d.entries[:k]
	d.entries = d.entries[k:]
	return out, nil
}
