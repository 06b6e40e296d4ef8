//go:build linux

package mirror

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/fsnotify/fsnotify"
	"github.com/go-git/go-billy/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
)

// requireNothingLeft fails when the mirror in dir holds anything a
// failed operation left: a file or directory in objects/pack that is not
// a pack's own, a temporary or lock file anywhere in it, the git CLI's
// clone beside it, or a file it holds open (whose room a removed name
// would not give back).
func requireNothingLeft(t *testing.T, dir string) {
	t.Helper()
	var left []string
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		n := d.Name()
		inPacks := filepath.Dir(rel) == filepath.Join("objects", "pack")
		switch {
		case inPacks && (!strings.HasPrefix(n, "pack-") || strings.HasSuffix(n, ".keep")),
			strings.Contains(n, "tmp"), strings.HasSuffix(n, ".lock"), strings.HasPrefix(n, "incoming-"),
			strings.HasPrefix(n, "._packed-refs"), strings.HasPrefix(n, "packs_"), strings.HasPrefix(n, "refs_"):
			left = append(left, rel)
		}
		return nil
	}))
	assert.Empty(t, left, "left in the mirror")
	assert.NoDirExists(t, dir+".clone")
	assert.Zero(t, openIn(t, dir), "files of the mirror held open")
}

// written is closed when a file whose name starts with prefix is written
// in dir.
func written(t *testing.T, dir, prefix string) <-chan struct{} {
	t.Helper()
	fw, err := fsnotify.NewWatcher()
	require.NoError(t, err)
	require.NoError(t, fw.Add(dir))
	seen, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		for e := range fw.Events {
			if seen != nil && e.Has(fsnotify.Write) && strings.HasPrefix(filepath.Base(e.Name), prefix) {
				close(seen)
				seen = nil
			}
		}
	}()
	t.Cleanup(func() {
		_ = fw.Close()
		<-ended
	})
	return seen
}

// leftoverCase is a way of fetching into a mirror, which the first fetch
// made (or left empty), that receives a pack into objects/pack: go-git's
// fetch, the git CLI's.
type leftoverCase struct {
	name  string
	opts  Options
	first bool // a first fetch of a small commit before the big one
	fetch func(ctx context.Context, m *Mirror) error
}

func fetchMain(ctx context.Context, m *Mirror) error {
	_, err := m.Fetch(ctx, nil, []string{"refs/heads/main"})
	return err
}

var leftoverCases = []leftoverCase{
	{"go-git, first fetch", Options{}, false, fetchMain},
	{"go-git", Options{}, true, fetchMain},
	// git fetch --depth into a shallow mirror (go-git stands in when it
	// fails, but for a stop).
	{"git CLI", Options{GitCLI: "git", ShallowDepth: 1}, true, fetchMain},
}

// leftoverMirror is a mirror of a repository whose next fetch brings a
// pack of some 512 KiB, the fetch that does so (run it in a goroutine:
// its error comes on the channel), and the mirror's directory.
func leftoverMirror(t *testing.T, srv *gittest.Server, tc leftoverCase) (*gittest.Repo, *Mirror, string) {
	t.Helper()
	repo := srv.NewRepo(t, "g/r")
	repo.Commit(t, "small", gittest.File("a", "a"))
	dir := t.TempDir()
	m, err := Open(dir, repo.URL(), tc.opts)
	require.NoError(t, err)
	if tc.first {
		require.NoError(t, tc.fetch(ctxT(t), m))
	}
	repo.Commit(t, "big", gittest.File("big", noise(t, 1<<20)))
	return repo, m, dir
}

// A fetch whose remote breaks mid-pack leaves nothing in the mirror (go-git
// left its temporary pack, open; a git that died, its own), and the next
// fetch succeeds. (The git CLI's failure is followed by go-git's fetch,
// which succeeds: what git left stayed all the same.)
func TestFetchCutMidPackLeavesNothing(t *testing.T) {
	for _, tc := range leftoverCases {
		t.Run(tc.name, func(t *testing.T) {
			srv := gittest.NewServer(t)
			repo, m, dir := leftoverMirror(t, srv, tc)
			packing := written(t, filepath.Join(dir, "objects", "pack"), "tmp_pack_")
			// go-git writes the pack 32 KiB at a time, read from packets of
			// up to 64 KiB: the stall is past two whole packets.
			srv.Stall(repo.Name(), 192<<10)
			errc := make(chan error, 1)
			go func() { errc <- tc.fetch(ctxT(t), m) }()
			select {
			case <-packing:
			case err := <-errc:
				t.Fatalf("the fetch ended before a pack was received: %v", err)
			}
			srv.Stall(repo.Name(), -1) // cut
			err := <-errc
			if tc.opts.GitCLI == "" {
				require.Error(t, err)
			}
			requireNothingLeft(t, dir)
			require.NoError(t, tc.fetch(ctxT(t), m))
			requireNothingLeft(t, dir)
		})
	}
}

// A fetch stopped while it receives a pack leaves nothing in the mirror
// (go-git left its temporary pack, open; the git CLI, killed, its own),
// and the next fetch succeeds.
func TestFetchStoppedMidPackLeavesNothing(t *testing.T) {
	for _, tc := range leftoverCases {
		t.Run(tc.name, func(t *testing.T) {
			srv := gittest.NewServer(t)
			repo, m, dir := leftoverMirror(t, srv, tc)
			packing := written(t, filepath.Join(dir, "objects", "pack"), "tmp_pack_")
			// go-git writes the pack 32 KiB at a time, read from packets of
			// up to 64 KiB: the stall is past two whole packets.
			srv.Stall(repo.Name(), 192<<10)
			t.Cleanup(func() { srv.Stall(repo.Name(), -1) })
			ctx, cancel := context.WithCancel(ctxT(t))
			errc := make(chan error, 1)
			go func() { errc <- tc.fetch(ctx, m) }()
			select {
			case <-packing:
			case err := <-errc:
				t.Fatalf("the fetch ended before a pack was received: %v", err)
			}
			cancel()
			require.Error(t, <-errc) // the CLI's is "signal: killed"
			requireNothingLeft(t, dir)
			srv.Stall(repo.Name(), -1)
			require.NoError(t, tc.fetch(ctxT(t), m))
			requireNothingLeft(t, dir)
		})
	}
}

// corruptingProxy passes requests on to upstream; while corrupt is set,
// the pack of a fetch's answer arrives whole but for the last byte of its
// checksum: written, then rejected.
func corruptingProxy(t *testing.T, upstream string) (string, *atomic.Bool) {
	t.Helper()
	corrupt := &atomic.Bool{}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := http.NewRequestWithContext(r.Context(), r.Method, upstream+r.URL.RequestURI(), r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		req.Header, req.ContentLength = r.Header.Clone(), r.ContentLength
		resp, err := tr.RoundTrip(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		if corrupt.Load() && r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-upload-pack") {
			flipPackTrailer(body)
		}
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, corrupt
}

// flipPackTrailer flips the last byte of the pack data (side band 1) in
// an upload-pack answer: the last of the pack's checksum.
func flipPackTrailer(body []byte) {
	last := -1
	for i := 0; i+4 <= len(body); {
		n, err := strconv.ParseUint(string(body[i:i+4]), 16, 16)
		if err != nil {
			break
		}
		if n <= 4 { // flush, delimiter
			i += 4
			continue
		}
		if body[i+4] == 1 {
			last = i + int(n) - 1
		}
		i += int(n)
	}
	if last >= 0 {
		body[last] ^= 0xff
	}
}

// A pack received whole and rejected (its checksum is wrong) leaves
// nothing in the mirror (go-git left it, open, under its temporary name),
// and the next fetch succeeds.
func TestRejectedPackLeavesNothing(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	repo.Commit(t, "small", gittest.File("a", "a"))
	proxy, corrupt := corruptingProxy(t, srv.URL())
	dir := t.TempDir()
	m, err := Open(dir, proxy+"/"+repo.Name(), Options{})
	require.NoError(t, err)
	require.NoError(t, fetchMain(ctxT(t), m))
	c := repo.Commit(t, "big", gittest.File("big", noise(t, 256<<10)))
	corrupt.Store(true)
	require.ErrorContains(t, fetchMain(ctxT(t), m), "checksum mismatch")
	requireNothingLeft(t, dir)
	corrupt.Store(false)
	res, err := m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	require.Equal(t, c, res.Refs["refs/heads/main"].String())
	requireNothingLeft(t, dir)
}

// renameFails is a file system on which renames fail for want of room
// (a directory that needs a block more), and so does creating an index
// when createFails.
type renameFails struct {
	billy.Filesystem
	createFails bool
}

func (f renameFails) Rename(from, to string) error {
	return &os.LinkError{Op: "rename", Old: from, New: to, Err: syscall.ENOSPC}
}

func (f renameFails) Create(name string) (billy.File, error) {
	if f.createFails {
		return nil, &os.PathError{Op: "open", Path: name, Err: syscall.ENOSPC}
	}
	return f.Filesystem.Create(name)
}

// A pack received whole whose saving fails (its index cannot be made,
// or it cannot be renamed into place) leaves nothing: go-git left its
// temporary pack, and the index it wrote, which names no pack.
func TestFailedPackSaveLeavesNothing(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	repo.Commit(t, "one", gittest.File("a", noise(t, 64<<10)))
	repo.Git(t, "-C", repo.BareDir(), "repack", "-adq")
	packs, err := filepath.Glob(filepath.Join(repo.BareDir(), "objects", "pack", "*.pack"))
	require.NoError(t, err)
	require.Len(t, packs, 1)
	pack, err := os.ReadFile(packs[0])
	require.NoError(t, err)
	for _, createFails := range []bool{true, false} {
		t.Run(fmt.Sprint("index fails: ", createFails), func(t *testing.T) {
			dir := t.TempDir()
			m, err := Open(dir, repo.URL(), Options{})
			require.NoError(t, err)
			st := m.repo.Storer.(*mirrorStore)
			w, err := newPackWriter(renameFails{st.objects.FS(), createFails}, st.objects)
			require.NoError(t, err)
			_, err = w.Write(pack)
			require.NoError(t, err)
			require.ErrorIs(t, w.Close(), syscall.ENOSPC)
			requireNothingLeft(t, dir)
			require.NoError(t, fetchMain(ctxT(t), m))
		})
	}
}

// What a killed process left in a mirror, of every writer's temporaries,
// is removed when the mirror is opened, without a rebuild.
func TestOpenClearsWhatACrashLeft(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c := repo.Commit(t, "one", gittest.File("a", "a"))
	dir := t.TempDir()
	m, err := Open(dir, repo.URL(), Options{})
	require.NoError(t, err)
	require.NoError(t, fetchMain(ctxT(t), m))
	packs, err := filepath.Glob(filepath.Join(dir, "objects", "pack", "pack-*.pack"))
	require.NoError(t, err)
	require.Len(t, packs, 1)
	for _, p := range []string{
		"objects/pack/tmp_pack_1234", "objects/pack/tmp_idx_1234", "objects/pack/.tmp-99-pack-1234.pack",
		strings.TrimSuffix(strings.TrimPrefix(packs[0], dir+"/"), ".pack") + ".keep",
		"objects/incoming-1234/pack/tmp_pack_5678", "objects/tmp_objdir-incoming-1234/x",
		"objects/info/packs_1234", "info/refs_1234", ".tmp-modwatch-replaced1234", "._packed-refs1234",
	} {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, p), []byte("left"), 0o644))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(dir+".clone", "objects", "pack"), 0o755))

	m, err = Open(dir, repo.URL(), Options{})
	require.NoError(t, err)
	requireNothingLeft(t, dir)
	res, err := m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	require.NoError(t, res.Rebuilt)
	require.Equal(t, c, res.Refs["refs/heads/main"].String())
}

// An operation removes what it left, whatever its end (a panic here), and
// nothing that was there before it began.
func TestOperationsClearWhatTheyLeftOnly(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	repo.Commit(t, "one", gittest.File("a", "a"))
	dir := t.TempDir()
	m, err := Open(dir, repo.URL(), Options{})
	require.NoError(t, err)
	require.NoError(t, fetchMain(ctxT(t), m))
	before := filepath.Join(dir, "objects", "pack", "tmp_pack_before")
	require.NoError(t, os.WriteFile(before, []byte("not the operation's"), 0o644))
	during := []string{
		filepath.Join(dir, "objects", "pack", "tmp_pack_during"),
		filepath.Join(dir, "objects", "incoming-during", "x"),
		filepath.Join(dir, "refs", "heads", "main.lock"),
		filepath.Join(dir, "packed-refs.lock"),
	}
	require.PanicsWithValue(t, "mid-write", func() {
		defer m.lockToWrite()()
		for _, p := range during {
			require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
			require.NoError(t, os.WriteFile(p, []byte("x"), 0o644))
		}
		panic("mid-write")
	})
	for _, p := range during {
		assert.NoFileExists(t, p)
	}
	assert.NoDirExists(t, filepath.Join(dir, "objects", "incoming-during"))
	assert.FileExists(t, before)
	require.True(t, m.mu.TryLock(), "the mirror's lock is released")
	m.mu.Unlock()
}
