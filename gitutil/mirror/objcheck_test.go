package mirror

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/idxfile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/internal/packview"
	"github.com/modwatch/modwatch/internal/dev/gittest"
)

// packEntry is an entry of a pack written by writePack: the name its
// index gives it, its type and the size its header says, its base (an
// earlier entry's position for an OFS_DELTA, a name for a REF_DELTA),
// and the data deflated after the header.
type packEntry struct {
	name    plumbing.Hash
	typ     plumbing.ObjectType
	size    int64
	ofsBase int // entry index, for an OFS_DELTA
	ofsRaw  int64
	ref     plumbing.Hash
	data    []byte
	// deflated, when set, is the entry's data as written, in place of
	// data deflated.
	deflated []byte
}

func whole(name plumbing.Hash, typ plumbing.ObjectType, data []byte) packEntry {
	return packEntry{name: name, typ: typ, size: int64(len(data)), data: data}
}

// entryBytes makes the bytes of e at offset off, offs being the offsets
// of the entries before it.
func entryBytes(t *testing.T, e packEntry, off int64, offs []int64) []byte {
	var b bytes.Buffer
	size := e.size
	hdr := []byte{byte(e.typ)<<4 | byte(size&0x0f)}
	for size >>= 4; size > 0; size >>= 7 {
		hdr[len(hdr)-1] |= 0x80
		hdr = append(hdr, byte(size&0x7f))
	}
	b.Write(hdr)
	switch e.typ {
	case plumbing.OFSDeltaObject:
		dist := e.ofsRaw
		if dist == 0 {
			dist = off - offs[e.ofsBase]
		}
		b.Write(ofsBytes(dist))
	case plumbing.REFDeltaObject:
		b.Write(e.ref[:])
	}
	if e.deflated != nil {
		b.Write(e.deflated)
		return b.Bytes()
	}
	z := zlib.NewWriter(&b)
	_, err := z.Write(e.data)
	require.NoError(t, err)
	require.NoError(t, z.Close())
	return b.Bytes()
}

// ofsBytes encodes an OFS_DELTA's base distance as git does.
func ofsBytes(v int64) []byte {
	out := []byte{byte(v & 0x7f)}
	for v >>= 7; v > 0; v >>= 7 {
		v--
		out = append([]byte{0x80 | byte(v&0x7f)}, out...)
	}
	return out
}

// writePack makes entries the only pack of the mirror in dir, with an
// index that names each as packEntry.name: a pack whose checksum is
// right, whatever its entries hold.
func writePack(t *testing.T, dir string, entries []packEntry) {
	t.Helper()
	packDir := filepath.Join(dir, "objects", "pack")
	old, err := filepath.Glob(filepath.Join(packDir, "pack-*"))
	require.NoError(t, err)
	for _, p := range old {
		require.NoError(t, os.Remove(p))
	}
	var pack bytes.Buffer
	pack.WriteString("PACK")
	require.NoError(t, binary.Write(&pack, binary.BigEndian, [2]uint32{2, uint32(len(entries))}))
	w := new(idxfile.Writer)
	require.NoError(t, w.OnHeader(uint32(len(entries))))
	var offs []int64
	for _, e := range entries {
		off := int64(pack.Len())
		raw := entryBytes(t, e, off, offs)
		offs = append(offs, off)
		pack.Write(raw)
		require.NoError(t, w.OnInflatedObjectContent(e.name, off, crc32.ChecksumIEEE(raw), nil))
	}
	sum := sha1.Sum(pack.Bytes())
	pack.Write(sum[:])
	require.NoError(t, w.OnFooter(plumbing.Hash(sum)))
	idx, err := w.Index()
	require.NoError(t, err)
	base := filepath.Join(packDir, "pack-"+plumbing.Hash(sum).String())
	require.NoError(t, os.WriteFile(base+".pack", pack.Bytes(), 0o444))
	f, err := os.Create(base + ".idx")
	require.NoError(t, err)
	_, err = idxfile.NewEncoder(f).Encode(idx)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// delta makes a delta from a base of srcSize bytes to a target of size
// bytes that copies length bytes at offset of the base.
func delta(srcSize, size, offset, length int) []byte {
	var out []byte
	for _, v := range []int{srcSize, size} {
		for v >= 0x80 {
			out = append(out, byte(v)|0x80)
			v >>= 7
		}
		out = append(out, byte(v))
	}
	return append(out, 0x80|0x01|0x02|0x04|0x10|0x20|0x40,
		byte(offset), byte(offset>>8), byte(offset>>16),
		byte(length), byte(length>>8), byte(length>>16))
}

// objectOf reads object h of the mirror in dir, whole.
func objectOf(t *testing.T, dir string, h plumbing.Hash) (plumbing.ObjectType, []byte) {
	t.Helper()
	v, err := packview.New(dir, &packview.IndexCache{}, nil, new(atomic.Int64), packview.NewObjectLRU(0), false)
	require.NoError(t, err)
	defer v.Close()
	o, err := v.Object(h)
	require.NoError(t, err)
	r, err := o.Reader()
	require.NoError(t, err)
	defer r.Close()
	data, err := io.ReadAll(r)
	require.NoError(t, err)
	return o.Type(), data
}

// craftedMirror is a mirror of a repository of two files, f (content)
// and g, whose pack is then replaced by one that entries makes of f's
// name, its commit, tree and g staying whole.
type craftedMirror struct {
	dir           string
	repo          *gittest.Repo
	commit        gitutil.Hash
	tree, f, g    plumbing.Hash
	content, gcon []byte
	objs          []packEntry // the commit, the tree, g
}

func newCraftedMirror(t *testing.T, content []byte) *craftedMirror {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	gcon := bytes.Repeat([]byte("the base of the deltas\n"), 200)
	c := mustHash(repo.Commit(t, "1", gittest.File("f", string(content)), gittest.File("g", string(gcon))))
	cm := &craftedMirror{dir: t.TempDir(), repo: repo, commit: c, content: content, gcon: gcon}
	m, err := Open(cm.dir, repo.URL(), Options{})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	cm.tree = plumbing.NewHash(repo.Git(t, "rev-parse", "HEAD^{tree}"))
	cm.f = plumbing.NewHash(repo.Git(t, "rev-parse", "HEAD:f"))
	cm.g = plumbing.NewHash(repo.Git(t, "rev-parse", "HEAD:g"))
	for _, h := range []plumbing.Hash{plumbing.Hash(c), cm.tree, cm.g} {
		typ, data := objectOf(t, cm.dir, h)
		cm.objs = append(cm.objs, whole(h, typ, data))
	}
	return cm
}

// open writes the pack of the mirror's objects and f's entries, and
// opens the mirror, counting what it is told of damage.
func (cm *craftedMirror) open(t *testing.T, f ...packEntry) (*Mirror, *atomic.Int32) {
	writePack(t, cm.dir, append(append([]packEntry{}, cm.objs...), f...))
	var damaged atomic.Int32
	m, err := Open(cm.dir, cm.repo.URL(), Options{OnDamage: func(error) { damaged.Add(1) }})
	require.NoError(t, err)
	return m, &damaged
}

// readBothWays reads f of fsys whole and through Open, Stat and Read (as
// a publisher copies a file), returning the errors; a whole read that
// gives bytes must give the content f names.
func readBothWays(t *testing.T, fsys fs.FS, content []byte) (error, error) {
	data, whole := fs.ReadFile(fsys, "f")
	if whole == nil {
		assert.Equal(t, content, data, "what is read is what f names")
	}
	f, err := fsys.Open("f")
	if err != nil {
		return whole, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return whole, err
	}
	buf := make([]byte, st.Size())
	_, err = io.ReadFull(f, buf)
	return whole, err
}

// A pack whose checksum is right but whose objects are not what their
// names say gives an error, never wrong bytes and never a crash; the
// mirror is told it is damaged and the next fetch rebuilds it.
func TestObjectsHandedOutAreCheckedAgainstTheirNames(t *testing.T) {
	content := bytes.Repeat([]byte("0123456789abcdef"), 250) // 4,000 bytes
	big := bytes.Repeat([]byte("a large file, streamed from its pack\n"), 48_000)
	flipped := bytes.Clone(content)
	flipped[1000] ^= 1
	for _, c := range []struct {
		name    string
		content []byte
		f       func(cm *craftedMirror) []packEntry
		// The content is the named one, only its header lies: read
		// whole, it is right; opened, it is not the size its Stat said.
		wholeReads bool
	}{
		{"a size header 16 bytes short", content, func(cm *craftedMirror) []packEntry {
			e := whole(cm.f, plumbing.BlobObject, cm.content)
			e.size -= 16
			return []packEntry{e}
		}, true},
		{"a byte that is not the named content's", content, func(cm *craftedMirror) []packEntry {
			return []packEntry{whole(cm.f, plumbing.BlobObject, flipped)}
		}, false},
		{"a streamed file with a byte not its own", big, func(cm *craftedMirror) []packEntry {
			bad := bytes.Clone(cm.content)
			bad[len(bad)-3] ^= 1
			return []packEntry{whole(cm.f, plumbing.BlobObject, bad)}
		}, false},
		{"a delta that copies past its base", content, func(cm *craftedMirror) []packEntry {
			d := delta(len(cm.gcon), len(cm.content), len(cm.gcon)-10, len(cm.content))
			return []packEntry{{name: cm.f, typ: plumbing.REFDeltaObject, size: int64(len(d)), ref: cm.g, data: d}}
		}, false},
		{"an OFS_DELTA whose base is before the pack", content, func(cm *craftedMirror) []packEntry {
			d := delta(10, len(cm.content), 0, 10)
			return []packEntry{whole(plumbing.NewHash("1111111111111111111111111111111111111111"), plumbing.BlobObject, []byte("x")),
				{name: cm.f, typ: plumbing.OFSDeltaObject, size: int64(len(d)), ofsRaw: 1 << 20, data: d}}
		}, false},
		{"a REF_DELTA whose base is itself", content, func(cm *craftedMirror) []packEntry {
			d := delta(len(cm.content), len(cm.content), 0, len(cm.content))
			return []packEntry{{name: cm.f, typ: plumbing.REFDeltaObject, size: int64(len(d)), ref: cm.f, data: d}}
		}, false},
		{"two REF_DELTAs each the other's base", content, func(cm *craftedMirror) []packEntry {
			other := plumbing.NewHash("2222222222222222222222222222222222222222")
			d := delta(len(cm.content), len(cm.content), 0, len(cm.content))
			return []packEntry{
				{name: other, typ: plumbing.REFDeltaObject, size: int64(len(d)), ref: cm.f, data: d},
				{name: cm.f, typ: plumbing.REFDeltaObject, size: int64(len(d)), ref: other, data: d},
			}
		}, false},
		{"a delta chain past the bound", content, func(cm *craftedMirror) []packEntry {
			return chain(cm, packview.MaxDeltaChain+1)
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cm := newCraftedMirror(t, c.content)
			m, damaged := cm.open(t, c.f(cm)...)
			fsys, err := m.FS(cm.commit, at(""))
			require.NoError(t, err)
			whole, streamed := readBothWays(t, fsys, c.content)
			if !c.wholeReads {
				require.ErrorIs(t, whole, ErrCorrupt)
			}
			require.ErrorIs(t, streamed, ErrCorrupt)
			assert.Equal(t, int32(1), damaged.Load(), "the mirror is told, once")

			res, err := m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
			require.NoError(t, err)
			require.Error(t, res.Rebuilt, "the next fetch rebuilds")
			fresh, err := m.FS(cm.commit, at(""))
			require.NoError(t, err)
			data, err := fs.ReadFile(fresh, "f")
			require.NoError(t, err)
			assert.Equal(t, c.content, data)
		})
	}
}

// chain makes f a chain of n OFS_DELTAs, each copying the whole of the
// one before, from a whole base. The deltas are one, deflated once (a
// zlib writer each, 10,000 times, took a minute under -race).
func chain(cm *craftedMirror, n int) []packEntry {
	out := []packEntry{whole(plumbing.NewHash("3333333333333333333333333333333333333333"), plumbing.BlobObject, cm.content)}
	d := delta(len(cm.content), len(cm.content), 0, len(cm.content))
	var deflated bytes.Buffer
	z := zlib.NewWriter(&deflated)
	if _, err := z.Write(d); err != nil || z.Close() != nil {
		panic("deflating into memory failed")
	}
	for i := range n {
		name := plumbing.Hash(sha1.Sum(binary.BigEndian.AppendUint32(nil, uint32(i))))
		if i == n-1 {
			name = cm.f
		}
		out = append(out, packEntry{name: name, typ: plumbing.OFSDeltaObject, size: int64(len(d)), ofsBase: i, data: d, deflated: deflated.Bytes()})
	}
	return out
}

// Deltas as git makes them read as they did: a chain of a few hundred
// links, within the bound, gives the named content.
func TestADeltaChainWithinTheBoundReads(t *testing.T) {
	content := bytes.Repeat([]byte("0123456789abcdef"), 250)
	cm := newCraftedMirror(t, content)
	m, damaged := cm.open(t, chain(cm, 300)...)
	fsys, err := m.FS(cm.commit, at(""))
	require.NoError(t, err)
	whole, streamed := readBothWays(t, fsys, content)
	require.NoError(t, whole)
	require.NoError(t, streamed)
	data, err := fs.ReadFile(fsys, "f")
	require.NoError(t, err)
	assert.Equal(t, content, data)
	assert.Zero(t, damaged.Load())
}

// A byte that rots in a pack the store verified before, its size and
// modification time unchanged, is found by the verification that follows
// the failed read: no record of an earlier verification hides it.
func TestRotInAVerifiedPackIsFound(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	content := bytes.Repeat([]byte("some text that git deflates\n"), 400)
	c := mustHash(repo.Commit(t, "1", gittest.File("f", string(content))))
	dir := t.TempDir()
	var damaged atomic.Int32
	m, err := Open(dir, repo.URL(), Options{OnDamage: func(error) { damaged.Add(1) }})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	m.mu.Lock()
	require.NoError(t, m.verifyStore(), "verified once: its stamp recorded")
	m.mu.Unlock()

	// Rot a byte inside f's entry, keeping the pack's size and time.
	packs, err := filepath.Glob(filepath.Join(dir, "objects", "pack", "*.pack"))
	require.NoError(t, err)
	require.Len(t, packs, 1)
	f := plumbing.NewHash(repo.Git(t, "rev-parse", "HEAD:f"))
	idxs, err := (&packview.IndexCache{}).Indexes(dir, []plumbing.Hash{plumbing.NewHash(filepath.Base(packs[0])[5:45])})
	require.NoError(t, err)
	off, err := idxs[0].FindOffset(f)
	require.NoError(t, err)
	st, err := os.Stat(packs[0])
	require.NoError(t, err)
	require.NoError(t, os.Chmod(packs[0], 0o644))
	pf, err := os.OpenFile(packs[0], os.O_RDWR, 0)
	require.NoError(t, err)
	b := make([]byte, 1)
	_, err = pf.ReadAt(b, off+12)
	require.NoError(t, err)
	b[0] ^= 0x40
	_, err = pf.WriteAt(b, off+12)
	require.NoError(t, err)
	require.NoError(t, pf.Close())
	require.NoError(t, os.Chtimes(packs[0], time.Time{}, st.ModTime()))

	fsys, err := m.FS(c, at(""))
	require.NoError(t, err)
	_, err = fs.ReadFile(fsys, "f")
	require.ErrorIs(t, err, ErrCorrupt)
	assert.Equal(t, int32(1), damaged.Load())
	res, err := m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	require.Error(t, res.Rebuilt)
}

// bomb deflates n zero bytes: a stream of a few bytes per MiB.
func bomb(t *testing.T, n int) []byte {
	var b bytes.Buffer
	z, err := zlib.NewWriterLevel(&b, zlib.BestCompression)
	require.NoError(t, err)
	_, err = z.Write(make([]byte, n))
	require.NoError(t, err)
	require.NoError(t, z.Close())
	return b.Bytes()
}

// allocated returns the bytes fn allocated.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A few bytes that inflate to a great many are read no further than the
// size their entry says: an object read whole, and a delta's data, which
// a Stat reads to learn the size.
func TestAnEntryInflatesNoFurtherThanItsSize(t *testing.T) {
	content := []byte("a small file\n")
	const big = 64 << 20
	for _, c := range []struct {
		name string
		f    func(cm *craftedMirror) []packEntry
		op   func(fsys fs.FS) error
	}{
		{"an object read whole", func(cm *craftedMirror) []packEntry {
			return []packEntry{{name: cm.f, typ: plumbing.BlobObject, size: int64(len(cm.content)), deflated: bomb(t, big)}}
		}, func(fsys fs.FS) error { _, err := fs.ReadFile(fsys, "f"); return err }},
		{"a delta's data, read by Stat", func(cm *craftedMirror) []packEntry {
			return []packEntry{{name: cm.f, typ: plumbing.REFDeltaObject, size: 7, ref: cm.g, deflated: bomb(t, big)}}
		}, func(fsys fs.FS) error { _, err := fs.Stat(fsys, "f"); return err }},
	} {
		t.Run(c.name, func(t *testing.T) {
			cm := newCraftedMirror(t, content)
			m, damaged := cm.open(t, c.f(cm)...)
			fsys, err := m.FS(cm.commit, at(""))
			require.NoError(t, err)
			var opErr error
			n := allocated(func() { opErr = c.op(fsys) })
			require.ErrorIs(t, opErr, ErrCorrupt)
			assert.Less(t, n, uint64(big/4), "allocated while reading")
			assert.Equal(t, int32(1), damaged.Load())
		})
	}
}

// A read that starts past the beginning of a large file (a Range
// request) gets no byte of a file whose content is not its name's.
func TestAReadInTheMiddleOfADamagedFileFails(t *testing.T) {
	big := bytes.Repeat([]byte("a large file, streamed from its pack\n"), 48_000)
	cm := newCraftedMirror(t, big)
	bad := bytes.Clone(big)
	bad[len(bad)-3] ^= 1
	m, damaged := cm.open(t, whole(cm.f, plumbing.BlobObject, bad))
	fsys, err := m.FS(cm.commit, at(""))
	require.NoError(t, err)
	f, err := fsys.Open("f")
	require.NoError(t, err)
	defer f.Close()
	buf := make([]byte, 4096)
	_, err = f.(io.ReaderAt).ReadAt(buf, 1<<20)
	require.ErrorIs(t, err, ErrCorrupt)
	assert.Equal(t, int32(1), damaged.Load())
}

// A large loose object (git writes them for small fetches) is checked
// against its name as it is read too.
func TestALargeLooseObjectIsChecked(t *testing.T) {
	big := bytes.Repeat([]byte("a large loose object\n"), 100_000) // 2 MiB
	cm := newCraftedMirror(t, big)
	m, damaged := cm.open(t)
	bad := bytes.Clone(big)
	bad[10] ^= 1
	loose := filepath.Join(cm.dir, "objects", cm.f.String()[:2], cm.f.String()[2:])
	require.NoError(t, os.MkdirAll(filepath.Dir(loose), 0o755))
	var b bytes.Buffer
	z := zlib.NewWriter(&b)
	fmt.Fprintf(z, "blob %d\x00", len(bad))
	_, err := z.Write(bad)
	require.NoError(t, err)
	require.NoError(t, z.Close())
	require.NoError(t, os.WriteFile(loose, b.Bytes(), 0o444))
	fsys, err := m.FS(cm.commit, at(""))
	require.NoError(t, err)
	_, err = fs.ReadFile(fsys, "f")
	require.ErrorIs(t, err, ErrCorrupt)
	assert.Equal(t, int32(1), damaged.Load())
}

// A tree that names an entry "." (or "..", or with a slash) hashes to its
// name, and a walk of it would never end: it is refused, as git's fsck
// refuses it, the repository's error and not the mirror's damage.
func TestATreeEntryGitRefusesIsRefused(t *testing.T) {
	for _, name := range []string{".", "..", "a/b"} {
		t.Run(name, func(t *testing.T) {
			cm := newCraftedMirror(t, []byte("x"))
			// The root tree gains a directory entry of the given name
			// that is the root itself: a walk would loop.
			var tree bytes.Buffer
			tree.Write(cm.objs[1].data)
			fmt.Fprintf(&tree, "40000 %s\x00", name)
			tree.Write(cm.tree[:])
			newTree := plumbing.ComputeHash(plumbing.TreeObject, tree.Bytes())
			commit := bytes.Replace(cm.objs[0].data, []byte(cm.tree.String()), []byte(newTree.String()), 1)
			newCommit := plumbing.ComputeHash(plumbing.CommitObject, commit)
			cm.objs = append(cm.objs, whole(newTree, plumbing.TreeObject, tree.Bytes()), whole(newCommit, plumbing.CommitObject, commit),
				whole(cm.f, plumbing.BlobObject, []byte("x")))
			m, damaged := cm.open(t)
			fsys, err := m.FS(gitutil.Hash(newCommit), at(""))
			require.NoError(t, err)
			visits := 0
			err = fs.WalkDir(fsys, ".", func(_ string, _ fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				if visits++; visits > 100 {
					return errors.New("the walk does not end")
				}
				return nil
			})
			require.ErrorIs(t, err, ErrBadTree)
			assert.Zero(t, damaged.Load(), "the repository's error, not damage")
		})
	}
}

// A named pipe, a device or a link in place of a file go-git reads in the
// mirror (its configuration, HEAD, packed-refs, a ref) is refused, not
// waited on or followed: opening the mirror, or fetching, returns.
func TestAMirrorsOwnFilesAreNotPipes(t *testing.T) {
	for _, name := range []string{"config", "HEAD", "packed-refs", filepath.Join("refs", "heads", "main")} {
		for kind, mk := range map[string]func(path string) error{
			"pipe":            func(p string) error { return syscall.Mkfifo(p, 0o600) },
			"link to a pipe":  func(p string) error { q := p + ".fifo"; _ = syscall.Mkfifo(q, 0o600); return os.Symlink(q, p) },
			"link to a file":  func(p string) error { return os.Symlink("/etc/hostname", p) },
			"a device's link": func(p string) error { return os.Symlink("/dev/zero", p) },
		} {
			t.Run(name+"/"+kind, func(t *testing.T) {
				cm := newCraftedMirror(t, []byte("x"))
				p := filepath.Join(cm.dir, name)
				_ = os.Remove(p)
				require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
				require.NoError(t, mk(p))
				done := make(chan struct{})
				go func() {
					defer close(done)
					m, err := Open(cm.dir, cm.repo.URL(), Options{})
					if err == nil {
						_, _ = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
					}
				}()
				select {
				case <-done:
				case <-time.After(time.Minute):
					t.Fatal("the mirror waits on a named pipe of its own")
				}
			})
		}
	}
}
