package mirror

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/internal/packcheck"
	"github.com/modwatch/modwatch/internal/dev/gittest"
)

// cutPacks truncates every pack of a mirror to half its size.
func cutPacks(t *testing.T, dir string) {
	t.Helper()
	packs, err := filepath.Glob(filepath.Join(dir, "objects", "pack", "*.pack"))
	require.NoError(t, err)
	require.NotEmpty(t, packs)
	for _, p := range packs {
		st, err := os.Stat(p)
		require.NoError(t, err)
		require.NoError(t, os.Truncate(p, st.Size()/2))
	}
}

// A read error of a file system handed out marks the mirror damaged (once,
// told to OnDamage), the next fetch rebuilds it, and the old file system
// then refuses to read: a sink gets an error, never wrong bytes.
func TestFSReadErrorMarksMirrorDamaged(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	var files []gittest.Change
	for i := range 50 {
		files = append(files, gittest.File(filepath.Join("d", string(rune('a'+i%26))+string(rune('a'+i/26))), string(bytes.Repeat([]byte{byte(i)}, 4000))))
	}
	c := mustHash(repo.Commit(t, "1", files...))
	var damaged atomic.Int32
	dir := t.TempDir()
	m, err := Open(dir, repo.URL(), Options{OnDamage: func(error) { damaged.Add(1) }})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	old, err := m.FS(c, at(""))
	require.NoError(t, err)
	require.True(t, m.HasCommit(c))

	cutPacks(t, dir)
	var readErr error
	for _, name := range []string{"d/aa", "d/xb", "d/ab"} {
		if _, readErr = fs.ReadFile(old, name); readErr != nil {
			break
		}
	}
	require.ErrorIs(t, readErr, ErrCorrupt)
	_, _ = fs.ReadFile(old, "d/xb") // a second error is not a second report
	assert.Equal(t, int32(1), damaged.Load())
	assert.False(t, m.HasCommit(c), "a damaged mirror is not trusted")

	res, err := m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	require.Error(t, res.Rebuilt)
	_, err = fs.ReadFile(old, "d/aa")
	require.ErrorIs(t, err, ErrRebuilt, "a file system of the damaged store reads nothing more")
	fresh, err := m.FS(c, at(""))
	require.NoError(t, err)
	data, err := fs.ReadFile(fresh, "d/xb")
	require.NoError(t, err)
	assert.Equal(t, bytes.Repeat([]byte{49}, 4000), data)
}

// An index cut short between runs, or a pack without its index (a process
// killed between writing the two), is found at open and rebuilt.
func TestDamagedPacksFoundAtOpen(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c := repo.Commit(t, "1", gittest.File("f", "1"))
	for name, damage := range map[string]func(t *testing.T, idx string){
		"index cut short": func(t *testing.T, idx string) {
			st, err := os.Stat(idx)
			require.NoError(t, err)
			require.NoError(t, os.Truncate(idx, st.Size()-30))
		},
		"index missing": func(t *testing.T, idx string) { require.NoError(t, os.Remove(idx)) },
		"pack cut short": func(t *testing.T, idx string) {
			pack := idx[:len(idx)-len(".idx")] + ".pack"
			st, err := os.Stat(pack)
			require.NoError(t, err)
			require.NoError(t, os.Truncate(pack, st.Size()-1))
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			m, err := Open(dir, repo.URL(), Options{})
			require.NoError(t, err)
			_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
			require.NoError(t, err)
			require.NoError(t, packcheck.Packs(dir, true))
			require.NoError(t, packcheck.Packs(dir, false))
			idx, err := filepath.Glob(filepath.Join(dir, "objects", "pack", "*.idx"))
			require.NoError(t, err)
			require.Len(t, idx, 1)
			damage(t, idx[0])
			require.Error(t, packcheck.Packs(dir, false), "the quick check sees it")

			m, err = Open(dir, repo.URL(), Options{})
			require.NoError(t, err)
			res, err := m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
			require.NoError(t, err)
			require.ErrorContains(t, res.Rebuilt, "damaged object store")
			assert.Equal(t, c, res.Refs["refs/heads/main"].String())
			require.NoError(t, packcheck.Packs(dir, true))
		})
	}
}

// A large file is streamed from its pack: reading it allocates a small
// fraction of its size, and ReadAt and Seek see the same bytes.
func TestFSStreamsLargeFiles(t *testing.T) {
	const size = 24 << 20
	content := make([]byte, size)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range content {
		content[i] = byte(rng.Uint32())
	}
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c := mustHash(repo.Commit(t, "big", gittest.File("big.bin", string(content))))
	m, err := Open(t.TempDir(), repo.URL(), Options{})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	fsys, err := m.FS(c, at(""))
	require.NoError(t, err)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f, err := fsys.Open("big.bin")
	require.NoError(t, err)
	var h countingWriter
	n, err := io.Copy(&h, f.(io.Reader))
	require.NoError(t, err)
	runtime.ReadMemStats(&after)
	assert.Equal(t, int64(size), n)
	t.Logf("reading %d MiB allocated %.2f MiB", size>>20, float64(after.TotalAlloc-before.TotalAlloc)/(1<<20))
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(size/4), "streamed, not read whole")
	ra := f.(io.ReaderAt)
	buf := make([]byte, 4096)
	for _, off := range []int64{size - 4096, 0, size / 2} {
		_, err := ra.ReadAt(buf, off)
		require.NoError(t, err)
		assert.Equal(t, content[off:off+4096], buf, "at %d", off)
	}
	end, err := f.(io.Seeker).Seek(0, io.SeekEnd)
	require.NoError(t, err)
	assert.Equal(t, int64(size), end)
	_, err = f.(io.Seeker).Seek(size-10, io.SeekStart)
	require.NoError(t, err)
	tail, err := io.ReadAll(f.(io.Reader))
	require.NoError(t, err)
	assert.Equal(t, content[size-10:], tail)
	require.NoError(t, f.Close())
}

type countingWriter struct{ n uint64 }

func (w *countingWriter) Write(p []byte) (int, error) { w.n += uint64(len(p)); return len(p), nil }

// A mirror that passes its pack threshold is repacked after a fetch, with
// the git CLI or go-git; a file system opened before, and closed as the
// watcher closes it after a delivery, keeps reading the same bytes through
// more fetches and repacks for as long as it is kept, and the packs it
// held are deleted at a fetch once it is collected.
func TestRepackKeepsFileSystemsWhole(t *testing.T) {
	for name, cli := range map[string]string{"git CLI": "git", "go-git": ""} {
		t.Run(name, func(t *testing.T) {
			srv := gittest.NewServer(t)
			repo := srv.NewRepo(t, "g/r")
			c0 := mustHash(repo.Commit(t, "0", gittest.File("keep/f", "kept"), gittest.File("n", "0")))
			dir := t.TempDir()
			m, err := Open(dir, repo.URL(), Options{GitCLI: cli, RepackPacks: 3})
			require.NoError(t, err)
			_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
			require.NoError(t, err)
			old, err := m.FS(c0, at(""))
			require.NoError(t, err)
			require.NoError(t, old.(io.Closer).Close(), "as the watcher does when Deliver returns")
			held := packNames(dir) // what old reads
			kept := func() (n int) {
				now := packNames(dir)
				for p := range held {
					if now[p] {
						n++
					}
				}
				return n
			}

			var last gitutil.Hash
			lastN := ""
			commit := func(i int) {
				lastN = fmt.Sprint(i + 1)
				last = mustHash(repo.Commit(t, fmt.Sprint(i), gittest.File("n", lastN)))
				_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
				require.NoError(t, err)
			}
			for i := range 6 {
				commit(i)
			}
			require.Positive(t, m.Repacks())
			assert.Equal(t, len(held), kept(), "the packs a kept reader reads stay")
			read := func() {
				t.Helper()
				for _, name := range []string{"keep/f", "n"} {
					want := map[string]string{"keep/f": "kept", "n": "0"}[name]
					data, err := fs.ReadFile(old, name)
					require.NoError(t, err, "read through the file system kept since before the repacks")
					assert.Equal(t, want, string(data))
				}
			}
			read()
			require.NoError(t, old.(io.Closer).Close())
			repacks := m.Repacks()
			for i := 6; m.Repacks() == repacks; i++ {
				commit(i)
			}
			read()
			assert.Equal(t, len(held), kept())

			old = nil
			for range 5 { // the reader is collected at a GC; its packs go at the fetch after
				if kept() == 0 {
					break
				}
				runtime.GC()
				_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
				require.NoError(t, err)
			}
			assert.Zero(t, kept(), "dropped once the reader was collected")
			assert.LessOrEqual(t, len(packNames(dir)), 3)
			require.NoError(t, packcheck.Packs(dir, true))

			fresh, err := m.FS(last, at(""))
			require.NoError(t, err)
			data, err := fs.ReadFile(fresh, "n")
			require.NoError(t, err)
			assert.Equal(t, lastN, string(data))
			require.NoError(t, fresh.(io.Closer).Close())

			m, err = Open(dir, repo.URL(), Options{})
			require.NoError(t, err)
			res, err := m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
			require.NoError(t, err)
			assert.NoError(t, res.Rebuilt, "a repacked mirror is whole at the next open")
		})
	}
}

// Opening every file of a wide directory decodes the directory once, not
// once per file (the tree objects read are counted by the mirror).
func TestFSDecodesEachDirectoryOnce(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	files := gittest.Numbered(500, func(i int) string { return fmt.Sprintf("wide/f%03d", i) })
	c := mustHash(repo.Commit(t, "wide", files...))
	m, err := Open(t.TempDir(), repo.URL(), Options{})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	fsys, err := m.FS(c, at(""))
	require.NoError(t, err)
	defer fsys.(io.Closer).Close()

	before := m.TreesRead()
	for i := range 500 {
		data, err := fs.ReadFile(fsys, fmt.Sprintf("wide/f%03d", i))
		require.NoError(t, err)
		require.Equal(t, fmt.Sprint(i), string(data))
		f, err := fsys.Open(fmt.Sprintf("wide/f%03d", i))
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	assert.LessOrEqual(t, m.TreesRead()-before, int64(2), "the directory is decoded once for 1,000 opens")
}

// mirrorOfMain is a mirror of repo with its main branch fetched.
func mirrorOfMain(t *testing.T, repo *gittest.Repo) *Mirror {
	t.Helper()
	m, err := Open(t.TempDir(), repo.URL(), Options{})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	return m
}

// The record of file systems handed out holds only those alive: a watcher
// makes one per delivery and drops it, and a remote of ten targets must
// not keep ten records of deliveries long over.
func TestFileSystemsHandedOutAreForgottenOnceCollected(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c := mustHash(repo.Commit(t, "1", gittest.File("f", "1")))
	m := mirrorOfMain(t, repo)
	records := func() int {
		m.readersMu.Lock()
		defer m.readersMu.Unlock()
		return len(m.readers)
	}
	kept, err := m.FS(c, at(""))
	require.NoError(t, err)
	// The ten are held until counted: a collection that runs meanwhile
	// (the package's other tests allocate) must not forget one early.
	dropped := make([]fs.FS, 10)
	for i := range dropped {
		fsys, err := m.FS(c, at(""))
		require.NoError(t, err)
		require.NoError(t, fsys.(io.Closer).Close())
		dropped[i] = fsys
	}
	require.Equal(t, 11, records())
	runtime.KeepAlive(dropped) // from here the ten may be collected
	require.Eventually(t, func() bool {
		runtime.GC()
		return records() == 1
	}, time.Minute, 10*time.Millisecond, "the ten dropped are forgotten once collected")
	runtime.KeepAlive(kept)
}

// File systems that read the same packs share one record of them, and one
// made after a fetch wrote a pack gets a record of its own, while those
// before keep theirs.
func TestFileSystemsOfTheSamePacksShareTheirRecord(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := mustHash(repo.Commit(t, "1", gittest.File("f", "1")))
	m := mirrorOfMain(t, repo)
	record := func(fsys fs.FS) []string {
		m.readersMu.Lock()
		defer m.readersMu.Unlock()
		return m.readers[fsys.(*treeFS).reader]
	}
	a, err := m.FS(c1, at(""))
	require.NoError(t, err)
	b, err := m.FS(c1, at(""))
	require.NoError(t, err)
	first := slices.Clone(record(a))
	require.NotEmpty(t, first)
	assert.Same(t, &record(a)[0], &record(b)[0], "one record for the same packs")

	c2 := mustHash(repo.Commit(t, "2", gittest.File("f", "2")))
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	c, err := m.FS(c2, at(""))
	require.NoError(t, err)
	assert.Len(t, record(c), len(first)+1, "the new pack")
	assert.Equal(t, first, record(a), "the records before are as they were")
	assert.Equal(t, first, record(b))
	for _, fsys := range []fs.FS{a, b, c} {
		require.NoError(t, fsys.(io.Closer).Close())
	}
}
