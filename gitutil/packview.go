package gitutil

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/format/idxfile"
	"github.com/go-git/go-git/v5/plumbing/format/objfile"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/filesystem/dotgit"
)

// indexCache holds the decoded indexes of a mirror's packs for the views
// of [Mirror.FS]. A pack never changes (its name is its checksum), so its
// index decoded once serves every view: opening a file system of a large
// repository costs a directory listing, not the decoding of an index of
// every object it holds (go-git's store decodes them all at its first
// lookup, and it cannot be handed indexes decoded elsewhere).
type indexCache struct {
	mu    sync.Mutex
	packs map[plumbing.Hash]*idxfile.MemoryIndex
}

// indexes returns the decoded indexes of packs, decoding those not cached,
// and forgets the packs not named (gone, or replaced by a repack).
func (c *indexCache) indexes(d *dotgit.DotGit, packs []plumbing.Hash) ([]*idxfile.MemoryIndex, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	live := make(map[plumbing.Hash]*idxfile.MemoryIndex, len(packs))
	out := make([]*idxfile.MemoryIndex, len(packs))
	for i, h := range packs {
		idx := c.packs[h]
		if idx == nil {
			var err error
			if idx, err = decodeIndex(d, h); err != nil {
				return nil, err
			}
		}
		live[h], out[i] = idx, idx
	}
	c.packs = live
	return out, nil
}

// decodeIndex reads the index of pack h and checks that it is that pack's.
func decodeIndex(d *dotgit.DotGit, h plumbing.Hash) (idx *idxfile.MemoryIndex, err error) {
	f, err := d.ObjectPackIdx(h)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	idx = idxfile.NewMemoryIndex()
	if err := idxfile.NewDecoder(f).Decode(idx); err != nil {
		return nil, err
	}
	if !bytes.Equal(idx.PackfileChecksum[:], h[:]) {
		return nil, fmt.Errorf("%w: index of pack %s is for pack %s", idxfile.ErrMalformedIdxFile, h, hex.EncodeToString(idx.PackfileChecksum[:]))
	}
	return idx, nil
}

// maxOpenPacks bounds the pack files a view keeps open.
const maxOpenPacks = 4

// packView is a read-only object store over a fixed set of a mirror's
// packs (and its loose objects), with indexes from the mirror's
// [indexCache]. It is not safe for concurrent use.
type packView struct {
	dir   *dotgit.DotGit
	fs    billy.Filesystem
	cache cache.Object
	trees *atomic.Int64
	packs []viewPack
	open  []int // indexes into packs of the open ones, oldest first
}

type viewPack struct {
	hash plumbing.Hash
	idx  *idxfile.MemoryIndex
	pf   *packfile.Packfile // nil until read
}

// newPackView opens a view of the packs in dir as they are now, but for
// those left out; the caller holds the mirror's lock, so that no fetch or
// repack changes them meanwhile.
func newPackView(dir string, ic *indexCache, leftOut map[string]bool, trees *atomic.Int64) (*packView, error) {
	fs := osfs.New(dir)
	d := dotgit.New(fs)
	all, err := d.ObjectPacks()
	if err != nil {
		return nil, err
	}
	packs := all[:0]
	for _, h := range all {
		if !leftOut["pack-"+h.String()] {
			packs = append(packs, h)
		}
	}
	idxs, err := ic.indexes(d, packs)
	if err != nil {
		return nil, err
	}
	v := &packView{dir: d, fs: fs, cache: cache.NewObjectLRU(8 * cache.MiByte), trees: trees}
	for i, h := range packs {
		v.packs = append(v.packs, viewPack{hash: h, idx: idxs[i]})
	}
	return v, nil
}

var errReadOnly = errors.New("gitutil: the view of a mirror is read-only")

// find returns the pack that holds h and its offset there, or -1.
func (v *packView) find(h plumbing.Hash) (int, int64) {
	for i := range v.packs {
		if off, err := v.packs[i].idx.FindOffset(h); err == nil {
			return i, off
		}
	}
	return -1, 0
}

// pack returns the opened pack i, closing the oldest open one past the
// bound.
func (v *packView) pack(i int) (*packfile.Packfile, error) {
	p := &v.packs[i]
	if p.pf != nil {
		return p.pf, nil
	}
	f, err := v.dir.ObjectPack(p.hash)
	if err != nil {
		return nil, err
	}
	if len(v.open) == maxOpenPacks {
		old := &v.packs[v.open[0]]
		v.open = v.open[1:]
		_ = old.pf.Close()
		old.pf = nil
	}
	p.pf = packfile.NewPackfileWithCache(p.idx, v.fs, f, v.cache, streamThreshold)
	v.open = append(v.open, i)
	return p.pf, nil
}

// EncodedObject reads object h, counting trees.
func (v *packView) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	o, err := v.object(h)
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

func (v *packView) object(h plumbing.Hash) (plumbing.EncodedObject, error) {
	if i, off := v.find(h); i >= 0 {
		pf, err := v.pack(i)
		if err != nil {
			return nil, err
		}
		return pf.GetByOffset(off)
	}
	return v.loose(h)
}

// loose reads a loose object (the git CLI leaves a small clone unpacked).
func (v *packView) loose(h plumbing.Hash) (o plumbing.EncodedObject, err error) {
	if o, ok := v.cache.Get(h); ok {
		return o, nil
	}
	f, err := v.dir.Object(h)
	if os.IsNotExist(err) {
		return nil, plumbing.ErrObjectNotFound
	}
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	r, err := objfile.NewReader(f)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	typ, size, err := r.Header()
	if err != nil {
		return nil, err
	}
	if size > streamThreshold {
		return dotgit.NewEncodedObject(v.dir, h, typ, size), nil
	}
	mo := &plumbing.MemoryObject{}
	mo.SetType(typ)
	mo.SetSize(size)
	if _, err := io.Copy(mo, io.LimitReader(r, size+1)); err != nil {
		return nil, err
	}
	if mo.Size() != size || mo.Hash() != h {
		return nil, fmt.Errorf("gitutil: loose object %s: bad object", h)
	}
	v.cache.Put(mo)
	return mo, nil
}

// EncodedObjectSize returns the size of object h without reading it whole.
func (v *packView) EncodedObjectSize(h plumbing.Hash) (int64, error) {
	if i, off := v.find(h); i >= 0 {
		pf, err := v.pack(i)
		if err != nil {
			return 0, err
		}
		return pf.GetSizeByOffset(off)
	}
	f, err := v.dir.Object(h)
	if os.IsNotExist(err) {
		return 0, plumbing.ErrObjectNotFound
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	r, err := objfile.NewReader(f)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	_, size, err := r.Header()
	return size, err
}

// HasEncodedObject reports whether the view holds h.
func (v *packView) HasEncodedObject(h plumbing.Hash) error {
	if i, _ := v.find(h); i >= 0 {
		return nil
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
func (v *packView) NewEncodedObject() plumbing.EncodedObject { return &plumbing.MemoryObject{} }

// SetEncodedObject fails: the view is read-only.
func (v *packView) SetEncodedObject(plumbing.EncodedObject) (plumbing.Hash, error) {
	return plumbing.ZeroHash, errReadOnly
}

// IterEncodedObjects fails: nothing reads a mirror's view object by object.
func (v *packView) IterEncodedObjects(plumbing.ObjectType) (storer.EncodedObjectIter, error) {
	return nil, errReadOnly
}

// AddAlternate fails: a mirror has no alternates.
func (v *packView) AddAlternate(string) error { return errReadOnly }

// Close closes the open packs.
func (v *packView) Close() error {
	var errs []error
	for _, i := range v.open {
		errs = append(errs, v.packs[i].pf.Close())
		v.packs[i].pf = nil
	}
	v.open = nil
	return errors.Join(errs...)
}

var _ storer.EncodedObjectStorer = (*packView)(nil)
