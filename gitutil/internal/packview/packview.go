package packview

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/format/objfile"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/filesystem/dotgit"

	"github.com/modwatch/modwatch/gitutil/internal/packidx"
)

// IndexCache holds the indexes of a repository's packs ([packidx.Index]) for
// a mirror's store and the views of its file systems. A pack never changes
// (its name is its checksum), so its index opened once serves every
// reader: opening a file system of a large repository costs a directory
// listing. Packs leave it when they are deleted (see Forget).
type IndexCache struct {
	mu     sync.Mutex
	packs  map[plumbing.Hash]*packidx.Index
	checks map[plumbing.Hash]*entrySet // the entries of each found sound (see checkChain)
}

// checked returns the set of pack h's entries found sound, shared by
// every view.
func (c *IndexCache) checked(h plumbing.Hash) *entrySet {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.checks[h]
	if s == nil {
		if c.checks == nil {
			c.checks = map[plumbing.Hash]*entrySet{}
		}
		s = &entrySet{}
		c.checks[h] = s
	}
	return s
}

// Indexes returns the indexes of the packs of the repository in dir, opening
// those not cached.
func (c *IndexCache) Indexes(dir string, packs []plumbing.Hash) ([]*packidx.Index, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*packidx.Index, len(packs))
	for i, h := range packs {
		idx := c.packs[h]
		if idx == nil {
			var err error
			if idx, err = packidx.Open(filepath.Join(dir, "objects", "pack", "pack-"+h.String()+".idx"), h); err != nil {
				return nil, err
			}
			if c.packs == nil {
				c.packs = map[plumbing.Hash]*packidx.Index{}
			}
			c.packs[h] = idx
		}
		out[i] = idx
	}
	return out, nil
}

// Cached returns the indexes the cache holds, by pack.
func (c *IndexCache) Cached() map[plumbing.Hash]*packidx.Index {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.packs)
}

// Forget drops the pack named name ("pack-<checksum>"), or every pack when
// name is "". Readers that hold its index keep it.
func (c *IndexCache) Forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if name == "" {
		c.packs, c.checks = nil, nil
		return
	}
	h := plumbing.NewHash(strings.TrimPrefix(name, "pack-"))
	delete(c.packs, h)
	delete(c.checks, h)
}

// StreamThreshold is the size above which an object is streamed from its
// pack rather than read into memory (and the object cache): a blob of a
// mirror's file system, say.
const StreamThreshold = 1 << 20

// maxOpenPacks bounds the pack files a view keeps open.
const maxOpenPacks = 4

// View is a read-only object store over a mirror's packs (and its
// loose objects), with indexes from the mirror's [IndexCache]. A fixed
// view (a file system's) reads the packs there were when it was made; a
// live one (the mirror's own) looks for new packs when an object is not
// found after it was told of a pack written (see Written). It is not
// safe for concurrent use.
type View struct {
	root    string
	dir     *dotgit.DotGit
	fs      billy.Filesystem
	ic      *IndexCache
	cache   cache.Object
	trees   *atomic.Int64
	live    bool
	stale   bool // a live view's packs changed since it listed them
	leftOut map[string]bool
	packs   []viewPack
	open    []int                      // indexes into packs of the open ones, oldest first
	sound   map[plumbing.Hash]struct{} // objects read whole and checked against their names
}

type viewPack struct {
	hash    plumbing.Hash
	idx     *packidx.Index
	pf      *packfile.Packfile // nil until read
	file    billy.File         // pf's file
	checked *entrySet          // entries whose delta chains were walked (checkChain)
}

// New opens a view of the packs in dir as they are now, but for
// those left out; the caller holds the mirror's lock, so that no fetch or
// repack changes them meanwhile.
func New(dir string, ic *IndexCache, leftOut map[string]bool, trees *atomic.Int64, objects cache.Object, live bool) (*View, error) {
	fs := newOwnFS(dir)
	v := &View{root: dir, dir: dotgit.New(fs), fs: fs, ic: ic, cache: objects, trees: trees, live: live, leftOut: leftOut}
	if _, err := v.Refresh(); err != nil {
		return nil, err
	}
	if !live {
		v.leftOut = nil // read at the start only
	}
	return v, nil
}

// Refresh adds the packs on disk the view does not have yet, and reports
// whether there were any.
func (v *View) Refresh() (bool, error) {
	all, err := v.dir.ObjectPacks()
	if err != nil {
		return false, err
	}
	var added []plumbing.Hash
	for _, h := range all {
		if !v.leftOut["pack-"+h.String()] && !slices.ContainsFunc(v.packs, func(p viewPack) bool { return p.hash == h }) {
			added = append(added, h)
		}
	}
	if len(added) == 0 {
		return false, nil
	}
	idxs, err := v.ic.Indexes(v.root, added)
	if err != nil {
		return false, err
	}
	for i, h := range added {
		v.packs = append(v.packs, viewPack{hash: h, idx: idxs[i], checked: v.ic.checked(h)})
	}
	return true, nil
}

// PackNames names the view's packs ("pack-<checksum>").
func (v *View) PackNames() []string {
	out := make([]string, len(v.packs))
	var name packName
	for i, p := range v.packs {
		out[i] = string(name.of(p.hash))
	}
	return out
}

// Named reports whether names are v's PackNames, without making them.
func (v *View) Named(names []string) bool {
	if len(names) != len(v.packs) {
		return false
	}
	var name packName
	for i, p := range v.packs {
		if names[i] != string(name.of(p.hash)) {
			return false
		}
	}
	return true
}

// packName holds a pack's name, "pack-<checksum>", made without an
// allocation.
type packName [len("pack-") + 2*len(plumbing.Hash{})]byte

func (n *packName) of(h plumbing.Hash) []byte {
	copy(n[:], "pack-")
	hex.Encode(n[len("pack-"):], h[:])
	return n[:]
}

// Written tells a live view that a pack was written into the mirror.
func (v *View) Written() { v.stale = true }

var errReadOnly = errors.New("mirror: the view of a mirror is read-only")

// locate finds the pack that holds h and its offset there; -1 when no
// pack does (it may be loose), after a live view that was told of new
// packs looked for them.
func (v *View) locate(h plumbing.Hash) (int, int64, error) {
	if i, off, err := v.find(h); err != nil || i >= 0 || !v.live || !v.stale {
		return i, off, err
	}
	// Listed once per pack written, not at every miss: a first fetch
	// asks about every ref a remote advertises, most of them absent.
	v.stale = false
	added, err := v.Refresh()
	if err != nil || !added {
		return -1, 0, err
	}
	return v.find(h)
}

// find returns the pack that holds h and its offset there, or -1; an
// index that cannot be read (a fault under its mapping) is an error, not
// a miss.
func (v *View) find(h plumbing.Hash) (int, int64, error) {
	for i := range v.packs {
		off, err := v.packs[i].idx.FindOffset(h)
		if err == nil {
			return i, off, nil
		}
		if !errors.Is(err, plumbing.ErrObjectNotFound) {
			return -1, 0, &ReadError{Pack: v.packs[i].hash, Object: h, Err: fmt.Errorf("index: %w", err)}
		}
	}
	return -1, 0, nil
}

// pack returns pack i opened, and what to call when done reading it. A
// file system's view keeps a few packs open while it is read (closing the
// oldest past the bound); the mirror's own view, open for as long as the
// watcher runs, closes each after use, so that a watcher of many remotes
// holds no descriptor between polls.
func (v *View) pack(i int) (*packfile.Packfile, io.ReaderAt, func(), error) {
	p := &v.packs[i]
	if p.pf != nil {
		return p.pf, p.file, func() {}, nil
	}
	f, err := v.dir.ObjectPack(p.hash)
	if err != nil {
		return nil, nil, nil, err
	}
	pf := packfile.NewPackfileWithCache(p.idx, v.fs, f, v.cache, StreamThreshold)
	if v.live {
		return pf, f, func() { _ = pf.Close() }, nil
	}
	if len(v.open) == maxOpenPacks {
		old := &v.packs[v.open[0]]
		v.open = v.open[1:]
		_ = old.pf.Close()
		old.pf, old.file = nil, nil
	}
	p.pf, p.file = pf, f
	v.open = append(v.open, i)
	return pf, f, func() {}, nil
}

// EncodedObject reads object h, counting trees.
func (v *View) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	o, err := v.Object(h)
	if err != nil {
		return nil, err
	}
	if t != plumbing.AnyObject && o.Type() != t {
		return nil, plumbing.ErrObjectNotFound
	}
	if o.Type() == plumbing.TreeObject {
		v.trees.Add(1)
	}
	return o, nil
}

// Object reads h: from a pack, its delta chain walked first and what
// go-git makes of it checked against h (see objcheck.go).
func (v *View) Object(h plumbing.Hash) (plumbing.EncodedObject, error) {
	i, off, err := v.locate(h)
	if err != nil {
		return nil, err
	}
	if i < 0 {
		return v.loose(h)
	}
	pf, f, done, err := v.pack(i)
	if err != nil {
		return nil, err
	}
	defer done()
	eh, data, err := readEntryHeader(f, off)
	if err != nil {
		return nil, &ReadError{Pack: v.packs[i].hash, Object: h, Err: err}
	}
	if eh.Type >= plumbing.CommitObject && eh.Type <= plumbing.TagObject && eh.Length <= StreamThreshold {
		return v.readWhole(i, f, h, eh, data)
	}
	if err := v.checkChain(i, f, off); err != nil {
		return nil, &ReadError{Pack: v.packs[i].hash, Object: h, Err: err}
	}
	// By hash: by offset, go-git first looks the hash up by offset,
	// which makes the index build its offset order for any read.
	o, err := pf.Get(h)
	if err != nil {
		return nil, &ReadError{Pack: v.packs[i].hash, Object: h, Err: err}
	}
	return v.checked(i, h, o)
}

// checked returns o, read from pack i as h, once it is h: an object read
// whole is hashed now (once per view), a streamed one as it is read.
func (v *View) checked(i int, h plumbing.Hash, o plumbing.EncodedObject) (plumbing.EncodedObject, error) {
	mo, ok := o.(*plumbing.MemoryObject)
	if !ok {
		return &checkedObject{EncodedObject: o, pack: v.packs[i].hash}, nil
	}
	if _, ok := v.sound[h]; ok {
		return o, nil
	}
	r, _ := mo.Reader()
	sum := objectHasher(mo.Type(), mo.Size())
	if n, _ := io.Copy(sum, r); n != mo.Size() || plumbing.Hash(sum.Sum(nil)) != h {
		return nil, &ReadError{Pack: v.packs[i].hash, Object: h, Err: ErrMismatch}
	}
	if v.sound == nil || len(v.sound) >= MaxChecked {
		v.sound = map[plumbing.Hash]struct{}{}
	}
	v.sound[h] = struct{}{}
	return o, nil
}

// openLoose opens loose object h and reads its header; done closes it.
func (v *View) openLoose(h plumbing.Hash) (r *objfile.Reader, typ plumbing.ObjectType, size int64, done func(), err error) {
	f, err := v.dir.Object(h)
	if os.IsNotExist(err) {
		return nil, 0, 0, nil, plumbing.ErrObjectNotFound
	}
	if err != nil {
		return nil, 0, 0, nil, err
	}
	if r, err = objfile.NewReader(f); err == nil {
		if typ, size, err = r.Header(); err != nil {
			_ = r.Close()
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, 0, 0, nil, err
	}
	return r, typ, size, func() { _ = r.Close(); _ = f.Close() }, nil
}

// loose reads a loose object (git writes them for small fetches).
func (v *View) loose(h plumbing.Hash) (plumbing.EncodedObject, error) {
	if o, ok := v.cache.Get(h); ok {
		return o, nil
	}
	r, typ, size, done, err := v.openLoose(h)
	if err != nil {
		return nil, err
	}
	defer done()
	if size > StreamThreshold {
		return &checkedObject{EncodedObject: dotgit.NewEncodedObject(v.dir, h, typ, size)}, nil
	}
	mo := &plumbing.MemoryObject{}
	mo.SetType(typ)
	mo.SetSize(size)
	if _, err := io.Copy(mo, io.LimitReader(r, size+1)); err != nil {
		return nil, err
	}
	if mo.Size() != size || mo.Hash() != h {
		return nil, &ReadError{Object: h, Err: fmt.Errorf("loose: %w", ErrMismatch)}
	}
	v.cache.Put(mo)
	return mo, nil
}

// EncodedObjectSize returns the size of object h without reading it whole.
func (v *View) EncodedObjectSize(h plumbing.Hash) (int64, error) {
	i, off, err := v.locate(h)
	if err != nil {
		return 0, err
	}
	if i >= 0 {
		pf, f, done, err := v.pack(i)
		if err != nil {
			return 0, err
		}
		defer done()
		if err := v.checkChain(i, f, off); err != nil {
			return 0, &ReadError{Pack: v.packs[i].hash, Object: h, Err: err}
		}
		size, err := pf.GetSizeByOffset(off)
		if err != nil {
			return 0, &ReadError{Pack: v.packs[i].hash, Object: h, Err: err}
		}
		return size, nil
	}
	_, _, size, done, err := v.openLoose(h)
	if err != nil {
		return 0, err
	}
	done()
	return size, nil
}

// HasEncodedObject reports whether the view holds h.
func (v *View) HasEncodedObject(h plumbing.Hash) error {
	if i, _, err := v.locate(h); err != nil || i >= 0 {
		return err
	}
	f, err := v.dir.Object(h)
	if os.IsNotExist(err) {
		return plumbing.ErrObjectNotFound
	}
	if err != nil {
		return err
	}
	return f.Close()
}

// NewEncodedObject is part of storer.EncodedObjectStorer.
func (v *View) NewEncodedObject() plumbing.EncodedObject { return &plumbing.MemoryObject{} }

// SetEncodedObject fails: the view is read-only.
func (v *View) SetEncodedObject(plumbing.EncodedObject) (plumbing.Hash, error) {
	return plumbing.ZeroHash, errReadOnly
}

// IterEncodedObjects fails: nothing reads a mirror's view object by object.
func (v *View) IterEncodedObjects(plumbing.ObjectType) (storer.EncodedObjectIter, error) {
	return nil, errReadOnly
}

// AddAlternate fails: a mirror has no alternates.
func (v *View) AddAlternate(string) error { return errReadOnly }

// Release closes the open packs and forgets them: the view, of a file
// system released, keeps none open nor their indexes mapped, and reads
// nothing more.
func (v *View) Release() {
	_ = v.Close()
	v.packs = nil
}

// Cache is the object cache the view reads through.
func (v *View) Cache() cache.Object { return v.cache }

// FS is the file system of the view's repository directory, which opens
// the store's own files only (no symlink, no named pipe).
func (v *View) FS() billy.Filesystem { return v.fs }

// Close closes the open packs.
func (v *View) Close() error {
	var errs []error
	for _, i := range v.open {
		errs = append(errs, v.packs[i].pf.Close())
		v.packs[i].pf, v.packs[i].file = nil, nil
	}
	v.open = nil
	return errors.Join(errs...)
}

var _ storer.EncodedObjectStorer = (*View)(nil)
