package mirror

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/internal/mountfs"
	"github.com/modwatch/modwatch/gitutil/internal/packview"
)

// ErrSymlinkEscape is returned (wrapped in a *fs.PathError) when a symlink
// in the tree points outside the root of the [io/fs.FS].
var ErrSymlinkEscape = errors.New("mirror: symlink points outside the tree")

const maxSymlinkHops = 40

// FS returns a read-only file system of what the selection keeps at commit
// (its Path is the root; what its Paths and ignore patterns leave out
// does not exist in it), read straight from the object store, with no
// checkout. Symlinks inside the tree
// are followed when they stay inside it and are an error ([ErrSymlinkEscape])
// when they point outside or are absolute; submodules are left out (see
// [Mirror.Submodules], which names them). The FS
// implements fs.ReadDirFS, fs.ReadFileFS, fs.StatFS and fs.ReadLinkFS and is
// safe for concurrent use. It has its own view of the mirror's store, so
// reading it never waits on a fetch, and it reads the same tree for as long
// as it is referenced: the packs a repack replaces stay on disk while an
// FS that reads them is (they are deleted at a fetch after it is garbage
// collected). It implements io.Closer, which closes the pack files it
// holds open (a read after it opens them again): close it when a read is
// over. A mirror rebuilt since makes it fail with [ErrRebuilt]; one
// handed on ([Detach]) may be released, past [Options.MaxKept], and
// fail with [ErrReleased]. Large files are streamed.
func (m *Mirror) FS(c gitutil.Hash, sel Selection) (fs.FS, error) {
	defer m.tell() // what reading the root found
	commit := plumbing.Hash(c)
	s, err := sel.compile()
	if err != nil {
		return nil, err
	}
	f, e, decoded, err := m.newTreeFS(commit, sel, s)
	if err != nil {
		return nil, err
	}
	if f == nil {
		return nil, fmt.Errorf("%w: %q at %s is a %s, not a directory", ErrPathNotFound, s.root, commit, e.Mode)
	}
	st := f.st
	var root *object.Tree
	if decoded != nil {
		// A path diff just decoded it: the entries are the tree's (its
		// hash names them), read-only, and the lookups of the file system
		// go through its own store.
		root = &object.Tree{Hash: decoded.Hash, Entries: decoded.Entries}
	} else {
		root, err = object.GetTree(st, e.Hash)
		if err != nil {
			if err = f.fetched(e.Hash, err); err == nil {
				root, err = object.GetTree(st, e.Hash)
			}
		}
	}
	if err != nil {
		_ = st.Close()
		return nil, fmt.Errorf("mirror: open tree %s: %w", e.Hash, m.readFailed(f.gen, err))
	}
	f.root = root
	return f, nil
}

// newTreeFS makes, holding m.mu, the file system of the selection s of
// commit, on a view of the packs of now, without its root tree yet; nil
// when the path is not a directory (e says what it is). decoded is the
// path's tree when a diff just decoded it.
func (m *Mirror) newTreeFS(commit plumbing.Hash, sel Selection, s *selector) (f *treeFS, e *object.TreeEntry, decoded *object.Tree, err error) {
	m.mu.Lock()
	defer m.unlock()
	e, err = m.entryAt(commit, s.root)
	if err == nil && !sel.plain() && e.Mode == filemode.Dir {
		_, err = m.selectionRoot(commit, s, e)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	if e.Mode != filemode.Dir {
		return nil, e, nil, nil
	}
	var when time.Time
	if c, cerr := m.commit(commit); cerr == nil {
		when = c.Committer.When
	}
	gen := m.gen.Load()
	decoded = m.keptTree(e.Hash)
	f = &treeFS{m: m, gen: gen, modTime: when, prefix: s.root}
	if !sel.plain() {
		f.sel, f.rules = s, map[string]rules{}
	}
	// The packs of now, with their indexes shared with the views before:
	// a fetch or repack later does not change what it reads.
	st, err := packview.New(m.dir, &m.indexes, m.replaced, &m.treesRead, packview.NewObjectLRU(8*cache.MiByte), false)
	if err != nil {
		return nil, nil, nil, m.markCorrupt(err) // m.mu is held: gen is the store's
	}
	f.st = st
	m.addReader(f, st)
	return f, e, decoded, nil
}

// treeFS is the file system of [Mirror.FS]. Any error reading the store
// marks the mirror damaged (the next fetch rebuilds it); once the mirror is
// rebuilt, every operation fails with [ErrRebuilt], and an operation that
// was reading while it happened returns that error, not what it read.
type treeFS struct {
	m       *Mirror
	gen     uint64
	mu      sync.Mutex // go-git's object storage is not safe for concurrent use
	st      *packview.View
	root    *object.Tree
	modTime time.Time
	reader  uint64 // its number in the mirror's readers (see addReader)
	// released is set when its mirror released it (see Detach): it reads
	// nothing more.
	released atomic.Bool

	// trees holds the directories decoded so far (and their name maps,
	// which go-git builds at the first lookup), so that opening the n
	// files of a directory decodes it once, not n times; entries counts
	// their entries, to bound what it holds.
	trees   map[plumbing.Hash]*object.Tree
	entries int

	// sel, when set, hides what the selection leaves out; rules holds the
	// ignore rules of the directories seen, by path; work is the budget of
	// the operation under way (each has its own).
	sel   *selector
	rules map[string]rules
	work  *budget

	// prefix is the root's path in the repository; trace, when set, is
	// told what lookups read through symbolic links (see TraceLinks):
	// traced holds what the operation under way read, told once it let
	// f.mu go.
	prefix string
	trace  func(path string)
	traced []string

	// sound holds the blobs read whole and found to be what their names
	// say (see verifyBlob).
	sound map[plumbing.Hash]struct{}
}

// hidden reports whether the entry rel, in directory dir (rel without
// its last element), is left out by the selection; the caller holds f.mu.
func (f *treeFS) hidden(rel []string, isDir bool) (bool, error) {
	if f.sel == nil {
		return false, nil
	}
	r, err := f.sel.rulesAt(f.root, rel[:len(rel)-1], f.rules, f.tree, f.ignoreFile)
	if err != nil {
		return false, err
	}
	return f.sel.hidden(f.work, r, rel, isDir)
}

// ignoreFile reads at most what an ignore file may hold, and a byte more;
// the caller holds f.mu.
func (f *treeFS) ignoreFile(h plumbing.Hash) ([]byte, error) {
	r, err := f.openLocked(h, -1)
	if err != nil {
		return nil, f.fail(err)
	}
	defer r.Close()
	data, err := io.ReadAll(io.LimitReader(r, maxIgnoreFile+1))
	if err != nil {
		return nil, f.fail(err)
	}
	return data, nil
}

// maxCachedEntries bounds the tree entries a file system keeps decoded
// (about 100 bytes each).
const maxCachedEntries = 1 << 20

// tree returns a decoded directory; the caller holds f.mu.
func (f *treeFS) tree(h plumbing.Hash) (*object.Tree, error) {
	if t, ok := f.trees[h]; ok {
		return t, nil
	}
	t, err := object.GetTree(f.st, h)
	if err != nil {
		if err = f.fetched(h, err); err == nil {
			t, err = object.GetTree(f.st, h)
		}
	}
	if err != nil {
		return nil, err
	}
	if f.entries+len(t.Entries) > maxCachedEntries {
		clear(f.trees)
		f.entries = 0
	}
	if f.trees == nil {
		f.trees = map[plumbing.Hash]*object.Tree{}
	}
	f.trees[h] = t
	f.entries += len(t.Entries)
	return t, nil
}

// Close closes the pack files the file system holds open. It stays
// readable after Close (it opens what it reads again) for as long as it is
// referenced: the packs it reads stay on disk until it is garbage
// collected.
func (f *treeFS) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st.Close()
}

// fail reports a read error of the store to the mirror; one of a file
// system released meanwhile is that, not damage.
func (f *treeFS) fail(err error) error {
	if f.released.Load() {
		return fmt.Errorf("%w: %w", ErrReleased, err)
	}
	return f.m.readFailed(f.gen, err)
}

// stale is ErrReleased once f was released (see Detach), ErrRebuilt once
// the mirror was rebuilt since f was made.
func (f *treeFS) stale() error {
	if f.released.Load() {
		return ErrReleased
	}
	if f.m.gen.Load() != f.gen {
		return ErrRebuilt
	}
	return nil
}

// checked runs op on f, refusing to start, or to return what it read, when
// the mirror was rebuilt meanwhile.
func checked[T any](f *treeFS, op, name string, fn func() (T, error)) (T, error) {
	var zero T
	var traced []string
	var trace func(string)
	defer func() {
		// The program's code, once f.mu is let go: what the operation
		// read through links, and what it found of the store.
		for _, p := range traced {
			trace(p)
		}
		f.m.tell()
	}()
	f.mu.Lock()
	defer func() {
		traced, trace = f.traced, f.trace
		f.traced = nil
		f.mu.Unlock()
	}()
	if err := f.stale(); err != nil {
		return zero, &fs.PathError{Op: op, Path: name, Err: err}
	}
	// An io/fs operation has no ctx: its budget bounds it.
	f.work = newBudget(context.Background())
	v, err := fn()
	if f.released.Load() {
		f.letGo() // released while it read (see letGoAll)
	}
	if serr := f.stale(); serr != nil && err == nil {
		return zero, &fs.PathError{Op: op, Path: name, Err: serr}
	}
	return v, err
}

var (
	_ fs.ReadDirFS  = (*treeFS)(nil)
	_ fs.ReadFileFS = (*treeFS)(nil)
	_ fs.StatFS     = (*treeFS)(nil)
	_ fs.ReadLinkFS = (*treeFS)(nil)
)

// node is a resolved name: a tree, or a blob entry.
type node struct {
	name  string // base name
	mode  filemode.FileMode
	hash  plumbing.Hash
	tree  *object.Tree // for directories
	isDir bool
	rel   []string // where it is, from the root
}

// resolve walks name from the root the way the operating system walks a
// checkout of the tree: one element at a time, a symlink's target spliced
// in where the link stands and walked the same way, ".." taking back the
// directory actually reached (not the text before it). A walk that would
// go above the root, or an absolute target, is [ErrSymlinkEscape]; so a
// chain such as "d -> ." then "evil -> d/d/../../x" is judged by where it
// lands, not by how it reads. The last element is followed only when
// followLast. The caller holds f.mu.
func (f *treeFS) resolve(op, name string, followLast bool) (node, error) {
	if !fs.ValidPath(name) {
		return node{}, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	n, err := f.walk(f.root, nil, splitPath(name), followLast)
	if err != nil {
		return node{}, &fs.PathError{Op: op, Path: name, Err: err}
	}
	return n, nil
}

// walk resolves the elements todo from the directory reached by the trees
// in stack below root; see resolve.
func (f *treeFS) walk(root *object.Tree, stack []*object.Tree, todo []string, followLast bool) (node, error) {
	var names []string // the path of the directory reached, parallel to stack
	cur := func() *object.Tree { return top(root, stack) }
	tr := trail{f: f}
	for len(todo) > 0 {
		tr.landed(names, len(todo))
		elem := todo[0]
		todo = todo[1:]
		switch elem {
		case "", ".":
			continue
		case "..":
			if len(stack) == 0 {
				return node{}, ErrSymlinkEscape
			}
			stack = stack[:len(stack)-1]
			names = names[:len(names)-1]
			continue
		}
		e, rel, err := f.visible(cur(), names, elem)
		if err != nil {
			return node{}, err
		}
		last := len(todo) == 0
		switch {
		case e.Mode == filemode.Symlink && (!last || followLast):
			elems, err := tr.follow(e, rel, len(todo))
			if err != nil {
				return node{}, err
			}
			todo = append(elems, todo...)
		case e.Mode == filemode.Dir:
			sub, err := f.tree(e.Hash)
			if err != nil {
				return node{}, f.fail(err)
			}
			if last {
				return tr.reached(node{name: e.Name, mode: e.Mode, hash: e.Hash, tree: sub, isDir: true, rel: rel}), nil
			}
			stack = append(stack, sub)
			names = rel
		case e.Mode == filemode.Submodule:
			return node{}, fs.ErrNotExist
		default:
			if !last {
				return node{}, errors.New("not a directory")
			}
			return tr.reached(node{name: e.Name, mode: e.Mode, hash: e.Hash, rel: rel}), nil
		}
	}
	t := cur()
	return tr.reached(node{name: ".", mode: filemode.Dir, hash: t.Hash, tree: t, isDir: true, rel: names}), nil
}

// top is the directory reached: the last of stack, or root.
func top(root *object.Tree, stack []*object.Tree) *object.Tree {
	if len(stack) == 0 {
		return root
	}
	return stack[len(stack)-1]
}

// visible finds elem in dir, the directory at names; an entry the
// selection hides is not there. It returns the entry's path too.
func (f *treeFS) visible(dir *object.Tree, names []string, elem string) (*object.TreeEntry, []string, error) {
	e, err := dir.FindEntry(elem)
	if err != nil {
		return nil, nil, fs.ErrNotExist
	}
	rel := append(slices.Clip(names), elem)
	if hidden, err := f.hidden(rel, e.Mode == filemode.Dir); err != nil {
		return nil, nil, err
	} else if hidden {
		return nil, nil, fs.ErrNotExist
	}
	return e, rel, nil
}

// linkElems are the path elements the symlink e points to; an empty or
// absolute target, or one with a NUL, escapes.
func (f *treeFS) linkElems(e *object.TreeEntry) ([]string, error) {
	target, err := f.blob(e.Hash)
	if err != nil {
		return nil, f.fail(err)
	}
	t := string(target)
	if t == "" || path.IsAbs(t) || strings.ContainsRune(t, 0) {
		return nil, ErrSymlinkEscape
	}
	return strings.Split(t, "/"), nil
}

func splitPath(name string) []string {
	if name == "." || name == "" {
		return nil
	}
	return strings.Split(name, "/")
}

// blob reads a whole blob; the caller holds f.mu.
func (f *treeFS) blob(h plumbing.Hash) ([]byte, error) {
	r, err := f.openLocked(h, -1)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// open opens a blob's stream. The store is read under f.mu, since go-git's
// is not safe for concurrent use; a large blob's stream has a file of its
// own and is read without it.
func (f *treeFS) open(h plumbing.Hash, size int64) (io.ReadCloser, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.openLocked(h, size)
}

// verifyBlob reads blob h whole once, checking it against its name (see
// packView.checked), unless this file system did before.
func (f *treeFS) verifyBlob(h plumbing.Hash, size int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.sound[h]; ok {
		return nil
	}
	r, err := f.openLocked(h, size)
	if err != nil {
		return err
	}
	defer r.Close()
	if _, err := io.Copy(io.Discard, r); err != nil {
		return err
	}
	if f.sound == nil || len(f.sound) >= packview.MaxChecked {
		f.sound = map[plumbing.Hash]struct{}{}
	}
	f.sound[h] = struct{}{}
	return nil
}

// openLocked is open for a caller that holds f.mu. A size not negative
// is the one the file system said the blob has (its header's): a blob
// whose content has another is damage, not a file to publish cut short.
func (f *treeFS) openLocked(h plumbing.Hash, size int64) (io.ReadCloser, error) {
	b, err := object.GetBlob(f.st, h)
	if err != nil {
		if err := f.fetched(h, err); err != nil {
			return nil, err
		}
		if b, err = object.GetBlob(f.st, h); err != nil {
			return nil, err
		}
	}
	if size >= 0 && b.Size != size {
		return nil, &packview.ReadError{Object: h, Err: fmt.Errorf("%w: %d bytes, its header says %d", packview.ErrMismatch, b.Size, size)}
	}
	return b.Reader()
}

func (f *treeFS) info(n node) (mountfs.Info, error) {
	var size int64
	if !n.isDir {
		var err error
		size, err = f.st.EncodedObjectSize(n.hash)
		if err != nil {
			if err = f.fetched(n.hash, err); err == nil {
				size, err = f.st.EncodedObjectSize(n.hash)
			}
		}
		if err != nil {
			return mountfs.Info{}, f.fail(err)
		}
	}
	return mountfs.NewInfo(n.name, size, goMode(n.mode), f.modTime), nil
}

func goMode(m filemode.FileMode) fs.FileMode {
	switch m {
	case filemode.Dir:
		return fs.ModeDir | 0o555
	case filemode.Executable:
		return 0o555
	case filemode.Symlink:
		return fs.ModeSymlink | 0o777
	default:
		return 0o444
	}
}

// Open opens a file or directory, following symlinks that stay inside. A
// file is read from the store as it is read: a large blob is streamed, not
// loaded whole.
func (f *treeFS) Open(name string) (fs.File, error) {
	return checked(f, "open", name, func() (fs.File, error) {
		n, err := f.resolve("open", name, true)
		if err != nil {
			return nil, err
		}
		fi, err := f.info(n)
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
		if n.isDir {
			entries, err := f.readDir(n)
			if err != nil {
				return nil, &fs.PathError{Op: "open", Path: name, Err: err}
			}
			return mountfs.NewDir(fi, entries), nil
		}
		return &blobFile{fs: f, name: name, hash: n.hash, info: fi}, nil
	})
}

// ReadFile reads a whole file.
func (f *treeFS) ReadFile(name string) ([]byte, error) {
	return checked(f, "readfile", name, func() ([]byte, error) {
		n, err := f.resolve("readfile", name, true)
		if err != nil {
			return nil, err
		}
		if n.isDir {
			return nil, &fs.PathError{Op: "readfile", Path: name, Err: errors.New("is a directory")}
		}
		data, err := f.blob(n.hash)
		if err != nil {
			return nil, &fs.PathError{Op: "readfile", Path: name, Err: f.fail(err)}
		}
		return data, nil
	})
}

// ReadDir lists a directory, sorted by name; symlinks are listed as such.
func (f *treeFS) ReadDir(name string) ([]fs.DirEntry, error) {
	return checked(f, "readdir", name, func() ([]fs.DirEntry, error) {
		n, err := f.resolve("readdir", name, true)
		if err != nil {
			return nil, err
		}
		if !n.isDir {
			return nil, &fs.PathError{Op: "readdir", Path: name, Err: errors.New("not a directory")}
		}
		entries, err := f.readDir(n)
		if err != nil {
			return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
		}
		return entries, nil
	})
}

func (f *treeFS) readDir(dir node) ([]fs.DirEntry, error) {
	t := dir.tree
	out := make([]fs.DirEntry, 0, len(t.Entries))
	for _, e := range t.Entries {
		if e.Mode == filemode.Submodule {
			continue
		}
		if !validEntryName(e.Name) {
			return nil, fmt.Errorf("%w: directory %q of tree %s holds an entry named %q", ErrBadTree, path.Join(dir.rel...), t.Hash, e.Name)
		}
		if hidden, err := f.hidden(append(slices.Clip(dir.rel), e.Name), e.Mode == filemode.Dir); err != nil {
			return nil, err
		} else if hidden {
			continue
		}
		n := node{name: e.Name, mode: e.Mode, hash: e.Hash, isDir: e.Mode == filemode.Dir}
		fi, err := f.info(n)
		if err != nil {
			return nil, err
		}
		out = append(out, fs.FileInfoToDirEntry(fi))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out, nil
}

// Stat describes a file, following symlinks that stay inside.
func (f *treeFS) Stat(name string) (fs.FileInfo, error) {
	return f.stat("stat", name, true)
}

// Lstat describes a file without following a final symlink.
func (f *treeFS) Lstat(name string) (fs.FileInfo, error) {
	return f.stat("lstat", name, false)
}

func (f *treeFS) stat(op, name string, follow bool) (fs.FileInfo, error) {
	return checked(f, op, name, func() (fs.FileInfo, error) {
		n, err := f.resolve(op, name, follow)
		if err != nil {
			return nil, err
		}
		fi, err := f.info(n)
		if err != nil {
			return nil, &fs.PathError{Op: op, Path: name, Err: err}
		}
		return fi, nil
	})
}

// ReadLink returns a symlink's target, only when it resolves inside the
// tree as the operating system would resolve it in a checkout (see
// resolve). A link to a missing name inside the tree is returned as it is:
// it dangles in a checkout too.
func (f *treeFS) ReadLink(name string) (string, error) {
	return checked(f, "readlink", name, func() (string, error) {
		n, err := f.resolve("readlink", name, false)
		if err != nil {
			return "", err
		}
		if n.mode != filemode.Symlink {
			return "", &fs.PathError{Op: "readlink", Path: name, Err: fs.ErrInvalid}
		}
		target, err := f.blob(n.hash)
		if err != nil {
			return "", &fs.PathError{Op: "readlink", Path: name, Err: f.fail(err)}
		}
		if _, err := f.resolve("readlink", name, true); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		if !LinkInside(path.Dir(name), string(target)) {
			// Dangling, and its text leaves the tree: refused too, so that no
			// later file can make it point outside.
			return "", &fs.PathError{Op: "readlink", Path: name, Err: ErrSymlinkEscape}
		}
		return string(target), nil
	})
}

// LinkInside reports whether a symlink target, read from directory dir of a
// tree (slash-separated, relative to its root), names a path inside the
// tree when every element is taken as written. It is the check for a link
// that dangles; a link that resolves must also land inside when followed
// physically, which the [io/fs.FS] of [Mirror.FS] and sink/dir check.
func LinkInside(dir, target string) bool {
	if target == "" || path.IsAbs(target) || strings.ContainsAny(target, "\x00\\") {
		return false
	}
	full := path.Join(dir, target)
	return full != ".." && !strings.HasPrefix(full, "../")
}

// blobFile reads a blob from the store as it is read. Its reader is opened
// at the first Read and reopened when a Seek or ReadAt moves backwards, so
// that a large file is streamed and never held whole.
type blobFile struct {
	fs   *treeFS
	name string
	hash plumbing.Hash
	info mountfs.Info

	mu     sync.Mutex
	r      io.ReadCloser // positioned at rpos; nil before the first read
	rpos   int64
	off    int64 // where the next Read starts
	closed bool
}

func (b *blobFile) Stat() (fs.FileInfo, error) { return b.info, nil }

func (b *blobFile) Read(p []byte) (int, error) {
	defer b.fs.m.tell() // what a read found, once b.mu is let go
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.readAt(p, b.off)
	b.off += int64(n)
	return n, err
}

// ReadAt and Seek make files usable with http.FileServer and friends.
func (b *blobFile) ReadAt(p []byte, off int64) (int, error) {
	defer b.fs.m.tell() // what a read found, once b.mu is let go
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.readAt(p, off)
	if err == nil && n < len(p) {
		err = io.EOF
	}
	return n, err
}

func (b *blobFile) Seek(off int64, whence int) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch whence {
	case io.SeekCurrent:
		off += b.off
	case io.SeekEnd:
		off += b.info.Size()
	}
	if off < 0 {
		return 0, &fs.PathError{Op: "seek", Path: b.name, Err: fs.ErrInvalid}
	}
	b.off = off
	return off, nil
}

func (b *blobFile) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	if b.r != nil {
		err := b.r.Close()
		b.r = nil
		return err
	}
	return nil
}

// readAt fills p from off, positioning the stream there first; the caller
// holds b.mu.
func (b *blobFile) readAt(p []byte, off int64) (int, error) {
	if b.closed {
		return 0, fs.ErrClosed
	}
	if off >= b.info.Size() {
		return 0, io.EOF
	}
	if err := b.fs.stale(); err != nil {
		if b.r != nil { // a stream of its own: of a pack that may be gone
			_ = b.r.Close()
			b.r = nil
		}
		return 0, b.err(err)
	}
	if b.r == nil || off < b.rpos {
		if b.r != nil {
			_ = b.r.Close()
			b.r = nil
		}
		if off > 0 {
			// A read that does not start at the beginning would hand
			// out bytes whose check comes at the end, never reached.
			if err := b.fs.verifyBlob(b.hash, b.info.Size()); err != nil {
				return 0, b.err(b.fs.fail(err))
			}
		}
		r, err := b.fs.open(b.hash, b.info.Size())
		if err != nil {
			return 0, b.err(b.fs.fail(err))
		}
		b.r, b.rpos = r, 0
	}
	if skip := off - b.rpos; skip > 0 {
		n, err := io.CopyN(io.Discard, b.r, skip)
		b.rpos += n
		if err != nil {
			return 0, b.err(b.fs.fail(noEOF(err)))
		}
	}
	want := min(int64(len(p)), b.info.Size()-off)
	n, err := io.ReadFull(b.r, p[:want])
	b.rpos += int64(n)
	if err != nil {
		return n, b.err(b.fs.fail(noEOF(err)))
	}
	if serr := b.fs.stale(); serr != nil {
		return 0, b.err(serr) // read while the mirror was rebuilt: not trusted
	}
	return n, nil
}

func (b *blobFile) err(err error) error { return &fs.PathError{Op: "read", Path: b.name, Err: err} }

// noEOF turns the end of a blob's stream before its recorded size into
// the short read it is.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// ErrBadTree is returned (wrapped) when a directory of a tree holds an
// entry whose name git itself refuses (fsck: empty, ".", "..", or with a
// slash or a NUL byte): a walk of it would loop or leave the tree. The
// repository's, not the mirror's damage.
var ErrBadTree = errors.New("mirror: a tree entry with a name git refuses")

// validEntryName reports whether name can be a tree entry's.
func validEntryName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\x00")
}
