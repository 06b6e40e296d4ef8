package mirror

import (
	"crypto/rand"
	"encoding/hex"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/dev/gittest"
)

// noise is n bytes that no compression shrinks, as text.
func noise(t *testing.T, n int) string {
	b := make([]byte, n/2)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

// objectBytes is what the mirror's object store takes on disk.
func objectBytes(t *testing.T, dir string) int64 {
	return gittest.DirBytes(t, filepath.Join(dir, "objects"))
}

func refNames(t *testing.T, m *Mirror) []string {
	iter, err := m.repo.References()
	require.NoError(t, err)
	defer iter.Close()
	var names []string
	for {
		r, err := iter.Next()
		if err != nil {
			break
		}
		if r.Type() == plumbing.HashReference {
			names = append(names, r.Name().String())
		}
	}
	return names
}

func TestTrimKeepsItsCommitsAtTheirDepth(t *testing.T) {
	gitBin, err := exec.LookPath("git")
	require.NoError(t, err, "the tests need git")
	const big = 256 << 10
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "one", gittest.File("a", "1"))
	c2 := repo.Commit(t, "two", gittest.File("big1", noise(t, big)))
	c3 := repo.Commit(t, "three", gittest.File("big2", noise(t, big)))
	repo.Checkout(t, "other")
	repo.Commit(t, "other", gittest.File("big3", noise(t, big)))
	repo.Checkout(t, "main")

	dir := t.TempDir()
	m, err := Open(dir, repo.URL(), Options{GitCLI: gitBin})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main", "refs/heads/other"})
	require.NoError(t, err)
	full := objectBytes(t, dir)
	require.Greater(t, full, int64(3*big/2), "each file stored in about half its size (hex)")
	held, err := m.FS(mustHash(c3), at(""))
	require.NoError(t, err)

	// c2 one deep: c2's tree and nothing else.
	changed, err := m.Trim(ctxT(t), []gitutil.Hash{mustHash(c2)}, nil, 1)
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Equal(t, []string{"refs/modwatch/commits/" + c2}, refNames(t, m))
	assert.True(t, m.HasCommit(mustHash(c2)))
	assert.False(t, m.HasCommit(mustHash(c3)), "the refs that led elsewhere are gone, and what they held")
	assert.False(t, m.HasCommit(mustHash(c1)), "beyond the depth")
	shallow, err := os.ReadFile(filepath.Join(dir, "shallow"))
	require.NoError(t, err)
	assert.Equal(t, c2+"\n", string(shallow))
	data, err := fs.ReadFile(mustFS(t, m, c2), "big1")
	require.NoError(t, err)
	assert.Len(t, data, big)
	// A file system handed out before stops reading, as after a rebuild.
	_, err = fs.ReadFile(held, "big2")
	require.ErrorIs(t, err, ErrRebuilt)
	assert.True(t, m.HasCommit(mustHash(c2)), "which is no damage")

	// Again: nothing to drop, nothing done.
	changed, err = m.Trim(ctxT(t), []gitutil.Hash{mustHash(c2)}, nil, 1)
	require.NoError(t, err)
	assert.False(t, changed)

	// The branch moves on: fetched onto the shallow mirror, whole.
	c4 := repo.Commit(t, "four", gittest.File("a", "4"))
	res, err := m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	assert.Equal(t, c4, res.Refs["refs/heads/main"].String())
	data, err = fs.ReadFile(mustFS(t, m, c4), "big2")
	require.NoError(t, err)
	assert.Len(t, data, big)

	// Two deep from where main is (a branch named, which the mirror
	// has, and one it lacks): c3 is the boundary, c2 goes.
	changed, err = m.Trim(ctxT(t), nil, []string{"refs/heads/main", "refs/heads/gone"}, 2)
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Equal(t, []string{"refs/heads/main"}, refNames(t, m))
	assert.False(t, m.HasCommit(mustHash(c2)))
	ok, err := m.IsAncestor(ctxT(t), mustHash(c3), mustHash(c4))
	require.NoError(t, err)
	assert.True(t, ok)
	shallow, err = os.ReadFile(filepath.Join(dir, "shallow"))
	require.NoError(t, err)
	assert.Equal(t, c3+"\n", string(shallow))
	assert.Less(t, objectBytes(t, dir), full-int64(big)/3, "big3 (of the branch dropped) is gone from the disk")

	// A commit the mirror lacks is an error, and nothing changes.
	_, err = m.Trim(ctxT(t), []gitutil.Hash{mustHash(c1)}, nil, 1)
	require.ErrorIs(t, err, ErrCommitNotFound)
	assert.Equal(t, []string{"refs/heads/main"}, refNames(t, m))

	// Depth 0 keeps the history there is, and drops the other refs only.
	changed, err = m.Trim(ctxT(t), []gitutil.Hash{mustHash(c4)}, nil, 0)
	require.NoError(t, err)
	assert.False(t, changed)
}

func mustFS(t *testing.T, m *Mirror, c string) fs.FS {
	f, err := m.FS(mustHash(c), at(""))
	require.NoError(t, err)
	return f
}

func TestTrimNeedsTheGitCLI(t *testing.T) {
	m, err := Open(t.TempDir(), "https://example.com/r.git", Options{})
	require.NoError(t, err)
	_, err = m.Trim(ctxT(t), nil, nil, 1)
	require.Error(t, err)
	_, err = m.Trim(ctxT(t), nil, nil, -1)
	require.Error(t, err)
}

// A process that ends while a reader holds the packs a repack replaced
// leaves them on disk; the next to open the mirror deletes them.
func TestReplacedPacksLeftAreDroppedAtOpen(t *testing.T) {
	gitBin, err := exec.LookPath("git")
	require.NoError(t, err, "the tests need git")
	const big = 256 << 10
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "one", gittest.File("big", noise(t, big)))
	dir := t.TempDir()
	opts := Options{GitCLI: gitBin, RepackPacks: 1}
	m, err := Open(dir, repo.URL(), opts)
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	held := mustFS(t, m, c1)
	repo.Commit(t, "two", gittest.File("big2", noise(t, big))) // a pack of the same size: both repacked
	res, err := m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	require.True(t, res.Repacked)
	before := objectBytes(t, dir)
	require.Greater(t, before, int64(big)*5/4, "the first pack, held by a reader, and the new one")
	_, err = fs.ReadFile(held, "big")
	require.NoError(t, err)

	// And a write of the file that a crash cut short.
	cut := filepath.Join(dir, ".tmp-"+replacedFile+"12345")
	require.NoError(t, os.WriteFile(cut, []byte("pack-"), 0o644))
	again, err := Open(dir, repo.URL(), opts)
	require.NoError(t, err)
	assert.NoFileExists(t, cut)
	assert.Less(t, objectBytes(t, dir), before*3/4)
	assert.True(t, again.HasCommit(mustHash(c1)))
	data, err := fs.ReadFile(mustFS(t, again, c1), "big")
	require.NoError(t, err)
	assert.Len(t, data, big)
	assert.NoFileExists(t, filepath.Join(dir, replacedFile))
}

func TestDeepenFetchesTheHistoryTrimmed(t *testing.T) {
	gitBin, err := exec.LookPath("git")
	require.NoError(t, err, "the tests need git")
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	var c []string
	for i := range 4 {
		c = append(c, repo.Commit(t, "c", gittest.File("a", string(rune('1'+i)))))
	}
	srv.SetBasicAuth("deploy", "deepen-s3cret")
	auth := &gitutil.Auth{Username: "deploy", Password: "deepen-s3cret", AllowInsecureHTTP: true}
	dir := t.TempDir()
	m, err := Open(dir, repo.URL(), Options{GitCLI: gitBin, TempDir: t.TempDir()})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), auth, []string{"refs/heads/main"})
	require.NoError(t, err)
	_, err = m.Trim(ctxT(t), []gitutil.Hash{mustHash(c[3])}, nil, 1)
	require.NoError(t, err)
	require.False(t, m.HasCommit(mustHash(c[2])))

	fetched, err := m.Deepen(ctxT(t), auth, mustHash(c[3]), 1)
	require.NoError(t, err)
	assert.False(t, fetched, "the mirror holds that much")

	_, err = m.Deepen(ctxT(t), nil, mustHash(c[3]), 3)
	require.Error(t, err, "the server wants credentials")
	assert.NotContains(t, err.Error(), "deepen-s3cret")

	fetched, err = m.Deepen(ctxT(t), auth, mustHash(c[3]), 3)
	require.NoError(t, err)
	assert.True(t, fetched)
	assert.True(t, m.HasCommit(mustHash(c[1])))
	assert.False(t, m.HasCommit(mustHash(c[0])))
	shallow, err := os.ReadFile(filepath.Join(dir, "shallow"))
	require.NoError(t, err)
	assert.Equal(t, c[1]+"\n", string(shallow))

	fetched, err = m.Deepen(ctxT(t), auth, mustHash(c[3]), 0)
	require.NoError(t, err)
	assert.True(t, fetched)
	assert.True(t, m.HasCommit(mustHash(c[0])))
	assert.NoFileExists(t, filepath.Join(dir, "shallow"))
	ok, err := m.IsAncestor(ctxT(t), mustHash(c[0]), mustHash(c[3]))
	require.NoError(t, err)
	assert.True(t, ok)
	fetched, err = m.Deepen(ctxT(t), auth, mustHash(c[3]), 0)
	require.NoError(t, err)
	assert.False(t, fetched)

	// A commit no ref leads to, and the mirror lacks: asked for by hash.
	_, err = m.Trim(ctxT(t), []gitutil.Hash{mustHash(c[3])}, nil, 1)
	require.NoError(t, err)
	require.False(t, m.HasCommit(mustHash(c[1])))
	fetched, err = m.Deepen(ctxT(t), auth, mustHash(c[1]), 1)
	require.NoError(t, err)
	assert.True(t, fetched)
	data, err := fs.ReadFile(mustFS(t, m, c[1]), "a")
	require.NoError(t, err)
	assert.Equal(t, "2", string(data))
	assert.False(t, m.HasCommit(mustHash(c[0])))
}

// A trim that drops a ref and nothing else writes again the pack the
// mirror has (the same objects, the same name): that pack is the mirror's
// still, not one it replaced.
func TestTrimThatRewritesTheSamePack(t *testing.T) {
	gitBin, err := exec.LookPath("git")
	require.NoError(t, err, "the tests need git")
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "one", gittest.File("a", "1"))
	repo.Tag(t, "v1", false)
	c2 := repo.Commit(t, "two", gittest.File("a", "2"))
	dir := t.TempDir()
	m, err := Open(dir, repo.URL(), Options{GitCLI: gitBin})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main", "refs/tags/v1"})
	require.NoError(t, err)
	_, err = m.Trim(ctxT(t), []gitutil.Hash{mustHash(c2)}, nil, 0)
	require.NoError(t, err)
	before := packNames(dir)

	// v1 (at c1, which c2 holds) was dropped: the pack is written again.
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/tags/v1"})
	require.NoError(t, err)
	changed, err := m.Trim(ctxT(t), []gitutil.Hash{mustHash(c2)}, nil, 0)
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, before, packNames(dir), "the same pack")
	runtime.GC()
	_, err = m.Trim(ctxT(t), []gitutil.Hash{mustHash(c2)}, nil, 0) // drops what no reader holds
	require.NoError(t, err)
	for _, mm := range []*Mirror{m, reopened(t, dir, repo.URL(), gitBin)} {
		assert.True(t, mm.HasCommit(mustHash(c2)))
		assert.True(t, mm.HasCommit(mustHash(c1)))
		data, err := fs.ReadFile(mustFS(t, mm, c2), "a")
		require.NoError(t, err)
		assert.Equal(t, "2", string(data))
	}
}

func reopened(t *testing.T, dir, url, gitBin string) *Mirror {
	m, err := Open(dir, url, Options{GitCLI: gitBin})
	require.NoError(t, err)
	return m
}

// A force-push onto a commit beyond a trimmed mirror's boundary: the git
// CLI fetches at the mirror's ShallowDepth, telling the server where the
// mirror's history ends, and git can walk what it has.
func TestFetchIntoATrimmedMirror(t *testing.T) {
	gitBin, err := exec.LookPath("git")
	require.NoError(t, err, "the tests need git")
	// A git whose fetches fail: go-git stands in, at the depth.
	failing := filepath.Join(t.TempDir(), "git")
	require.NoError(t, os.WriteFile(failing, []byte("#!/bin/sh\n[ \"$1\" = fetch ] && exit 1\nexec "+gitBin+" \"$@\"\n"), 0o755))
	for i, depth := range []int{1, 2, 1} {
		gitBin := gitBin
		if i == 2 {
			gitBin = failing
		}
		srv := gittest.NewServer(t)
		repo := srv.NewRepo(t, "g/r")
		base := repo.Commit(t, "base", gittest.File("a", "0"))
		repo.Commit(t, "one", gittest.File("a", "1"))
		c2 := repo.Commit(t, "two", gittest.File("a", "2"))
		dir := t.TempDir()
		var fellBack atomic.Int32
		m, err := Open(dir, repo.URL(), Options{GitCLI: gitBin, ShallowDepth: depth, OnFallback: func(cli error) {
			assert.ErrorContains(t, cli, "git fetch")
			fellBack.Add(1)
		}})
		require.NoError(t, err)
		_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
		require.NoError(t, err)
		assert.Equal(t, i == 2, fellBack.Load() > 0, "go-git stood in for a git that failed, and said so")
		_, err = m.Trim(ctxT(t), []gitutil.Hash{mustHash(c2)}, []string{"refs/heads/main"}, 1)
		require.NoError(t, err)
		require.False(t, m.HasCommit(mustHash(base)))

		repo.Reset(t, base)
		r3 := repo.Commit(t, "rewritten", gittest.File("a", "3"))
		res, err := m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
		require.NoError(t, err)
		assert.True(t, res.Fetched)
		assert.Equal(t, r3, res.Refs["refs/heads/main"].String())
		out, err := exec.Command(gitBin, "--git-dir", dir, "rev-list", r3).CombinedOutput()
		require.NoError(t, err, "git walks the history it has: %s", out)
		if depth == 1 {
			assert.Equal(t, r3, strings.TrimSpace(string(out)), "one deep")
			assert.False(t, m.HasCommit(mustHash(base)))
		} else {
			assert.Equal(t, r3+"\n"+base, strings.TrimSpace(string(out)), "two deep")
		}
		data, err := fs.ReadFile(mustFS(t, m, r3), "a")
		require.NoError(t, err)
		assert.Equal(t, "3", string(data))

		res, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
		require.NoError(t, err)
		assert.False(t, res.Fetched, "nothing moved")
	}
}

// With a ShallowDepth the first fetch is the git CLI's, that deep; should
// the CLI fail, go-git fetches in full.
func TestShallowFirstFetch(t *testing.T) {
	gitBin, statuses := recordingGit(t)
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "one", gittest.File("a", "1"))
	c2 := repo.Commit(t, "two", gittest.File("a", "2"))
	dir := t.TempDir()
	m, err := Open(dir, repo.URL(), Options{GitCLI: gitBin, ShallowDepth: 1})
	require.NoError(t, err)
	res, err := m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	assert.True(t, res.Fetched)
	assert.Equal(t, c2, res.Refs["refs/heads/main"].String())
	assert.False(t, m.HasCommit(mustHash(c1)), "one deep")
	assert.Equal(t, "0\n", statuses(), "one git fetch, which succeeded")
	args, err := os.ReadFile(filepath.Join(filepath.Dir(gitBin), "args"))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(args), "fetch "), "%s", args)
	assert.Contains(t, string(args), "--depth=1")

	full := t.TempDir()
	m, err = Open(full, repo.URL(), Options{GitCLI: "/nonexistent/git", ShallowDepth: 1})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	assert.True(t, m.HasCommit(mustHash(c1)), "go-git's fetch, in full")
}

// A detached HEAD (a clone of a tag) that leads elsewhere is made what an
// empty mirror's is, never deleted: git needs it.
func TestTrimOfADetachedHead(t *testing.T) {
	gitBin, err := exec.LookPath("git")
	require.NoError(t, err, "the tests need git")
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	repo.Commit(t, "one", gittest.File("a", "1"))
	repo.Tag(t, "v1", false)
	c2 := repo.Commit(t, "two", gittest.File("a", "2"))
	repo.Tag(t, "v2", false)
	dir := t.TempDir()
	m, err := Open(dir, repo.URL(), Options{GitCLI: gitBin})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/tags/v1", "refs/tags/v2"})
	require.NoError(t, err)
	head, err := os.ReadFile(filepath.Join(dir, "HEAD"))
	require.NoError(t, err)
	require.NotContains(t, string(head), "ref:", "the clone of a tag has a detached HEAD")

	_, err = m.Trim(ctxT(t), []gitutil.Hash{mustHash(c2)}, nil, 1)
	require.NoError(t, err)
	out, err := exec.Command(gitBin, "--git-dir", dir, "rev-parse", "--verify", c2+"^{commit}").CombinedOutput()
	require.NoError(t, err, "still a repository: %s", out)
	head, err = os.ReadFile(filepath.Join(dir, "HEAD"))
	require.NoError(t, err)
	assert.Equal(t, "ref: refs/heads/master\n", string(head))
}

// A branch that moved on in a mirror one deep: its last commit, the new
// one's parent, goes, and git can still walk the mirror (a reflog that
// named it would have kept it, without its own parents).
func TestTrimAfterTheBranchMovedOn(t *testing.T) {
	gitBin, err := exec.LookPath("git")
	require.NoError(t, err, "the tests need git")
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	repo.Commit(t, "zero", gittest.File("a", "0"))
	c1 := repo.Commit(t, "one", gittest.File("a", "1"))
	dir := t.TempDir()
	m, err := Open(dir, repo.URL(), Options{GitCLI: gitBin, ShallowDepth: 1})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	c2 := repo.Commit(t, "two", gittest.File("a", "2"))
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	// A git told to keep reflogs (core.logAllRefUpdates) names c1 in one.
	var out []byte
	for _, to := range []string{c1, c2} {
		out, err = exec.Command(gitBin, "-c", "core.logAllRefUpdates=always", "--git-dir", dir, "update-ref", "-m", "moved", "refs/heads/main", to).CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	changed, err := m.Trim(ctxT(t), []gitutil.Hash{mustHash(c2)}, []string{"refs/heads/main"}, 1)
	require.NoError(t, err)
	assert.True(t, changed)
	assert.False(t, m.HasCommit(mustHash(c1)))
	out, err = exec.Command(gitBin, "--git-dir", dir, "rev-list", "--all").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, c2, strings.TrimSpace(string(out)))
	out, err = exec.Command(gitBin, "--git-dir", dir, "fsck", "--connectivity-only").CombinedOutput()
	require.NoError(t, err, "%s", out)
}
