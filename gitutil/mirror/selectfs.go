package mirror

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
)

// maxSelectFSEntries bounds the entries FS walks: a file system given to
// it is as hostile as a tree.
const maxSelectFSEntries = 1 << 22

// FS returns what the selection keeps of fsys, a tree as a checkout holds
// it (a repository's files with others put in, as Flux puts a
// GitRepository's includes): the same rules as [Mirror.FS] applies to a
// commit's tree, the ignore files read from fsys, regular files only.
// The walk is done here, once, within the selection's budget and ctx;
// the result reads fsys for the entries kept and implements
// fs.ReadDirFS, fs.StatFS and fs.ReadLinkFS.
func (s Selection) FS(ctx context.Context, fsys fs.FS) (fs.FS, error) {
	sel, err := s.compile()
	if err != nil {
		return nil, err
	}
	if sel.root != "" {
		if fsys, err = fs.Sub(fsys, sel.root); err != nil {
			return nil, err
		}
	}
	w := &selectWalk{sel: sel, fsys: fsys, b: newBudget(ctx), kept: map[string]bool{".": true}}
	if err := w.walk(".", nil, sel.base()); err != nil {
		return nil, err
	}
	return &selectedFS{fsys: fsys, kept: w.kept}, nil
}

// selectWalk is one walk of FS.
type selectWalk struct {
	sel     *selector
	fsys    fs.FS
	b       *budget
	kept    map[string]bool
	entries int
}

// walk keeps what dir (at rel, under the parent's rules) holds that the
// selection keeps, and goes into the directories kept.
func (w *selectWalk) walk(dir string, rel []string, parent rules) error {
	entries, err := fs.ReadDir(w.fsys, dir)
	if err != nil {
		return err
	}
	if w.entries += len(entries); w.entries > maxSelectFSEntries {
		return fmt.Errorf("%w: more than %d files and directories", ErrInvalidSelection, maxSelectFSEntries)
	}
	if err := w.b.spend(int64(len(entries))); err != nil {
		return err
	}
	r, err := w.rules(dir, rel, parent, entries)
	if err != nil {
		return err
	}
	for _, e := range entries {
		sub := append(slices.Clip(rel), e.Name())
		hidden, err := w.sel.hidden(w.b, r, sub, e.IsDir())
		if err != nil {
			return err
		}
		if hidden {
			continue
		}
		p := path.Join(dir, e.Name())
		w.kept[p] = true
		if e.IsDir() {
			if err := w.walk(p, sub, r); err != nil {
				return err
			}
		}
	}
	return nil
}

// rules are those in dir: the parent's, and its ignore file's when it
// is a regular file.
func (w *selectWalk) rules(dir string, rel []string, parent rules, entries []fs.DirEntry) (rules, error) {
	if w.sel.file == "" {
		return parent, nil
	}
	i := slices.IndexFunc(entries, func(e fs.DirEntry) bool { return e.Name() == w.sel.file })
	if i < 0 || !entries[i].Type().IsRegular() {
		return parent, nil // none, or not a regular file: nothing read through a link
	}
	f, err := w.fsys.Open(path.Join(dir, w.sel.file))
	if err != nil {
		return rules{}, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxIgnoreFile+1))
	if err != nil {
		return rules{}, err
	}
	sum := sha256.Sum256(data)
	return w.sel.parseIgnoreFile(parent, rel, data, hex.EncodeToString(sum[:]))
}

// selectedFS is fsys with only the names kept.
type selectedFS struct {
	fsys fs.FS
	kept map[string]bool
}

var (
	_ fs.ReadDirFS  = (*selectedFS)(nil)
	_ fs.StatFS     = (*selectedFS)(nil)
	_ fs.ReadLinkFS = (*selectedFS)(nil)
)

func (f *selectedFS) Lstat(name string) (fs.FileInfo, error) {
	if err := f.check("lstat", name); err != nil {
		return nil, err
	}
	return fs.Lstat(f.fsys, name)
}

func (f *selectedFS) ReadLink(name string) (string, error) {
	if err := f.check("readlink", name); err != nil {
		return "", err
	}
	return fs.ReadLink(f.fsys, name)
}

func (f *selectedFS) check(op, name string) error {
	if !fs.ValidPath(name) {
		return &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	if !f.kept[name] {
		return &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
	}
	return nil
}

func (f *selectedFS) Open(name string) (fs.File, error) {
	if err := f.check("open", name); err != nil {
		return nil, err
	}
	file, err := f.fsys.Open(name)
	if err != nil {
		return nil, err
	}
	fi, err := file.Stat()
	if err != nil {
		_ = file.Close()
		return nil, err
	}
	if d, ok := file.(fs.ReadDirFile); ok && fi.IsDir() {
		return &selectedDir{ReadDirFile: d, fs: f, name: name}, nil
	}
	return file, nil // a file as it is: its Seek and ReadAt kept
}

func (f *selectedFS) Stat(name string) (fs.FileInfo, error) {
	if err := f.check("stat", name); err != nil {
		return nil, err
	}
	return fs.Stat(f.fsys, name)
}

func (f *selectedFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if err := f.check("readdir", name); err != nil {
		return nil, err
	}
	entries, err := fs.ReadDir(f.fsys, name)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(entries, func(e fs.DirEntry) bool { return !f.kept[path.Join(name, e.Name())] }), nil
}

// selectedDir is an open directory of a selectedFS: it lists what is kept.
type selectedDir struct {
	fs.ReadDirFile
	fs      *selectedFS
	name    string
	pending []fs.DirEntry
	read    bool
}

func (d *selectedDir) ReadDir(n int) ([]fs.DirEntry, error) {
	if !d.read {
		entries, err := d.fs.ReadDir(d.name)
		if err != nil {
			return nil, err
		}
		d.pending, d.read = entries, true
	}
	if n <= 0 {
		out := d.pending
		d.pending = nil
		return out, nil
	}
	if len(d.pending) == 0 {
		return nil, io.EOF
	}
	k := min(n, len(d.pending))
	out := d.pending[:k]
	d.pending = d.pending[k:]
	return out, nil
}
