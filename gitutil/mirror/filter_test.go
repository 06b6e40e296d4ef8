package mirror

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/dev/gittest"
)

func TestValidFilter(t *testing.T) {
	for _, spec := range []string{"blob:none", "blob:limit=0", "blob:limit=1024", "blob:limit=1k", "blob:limit=10M", "blob:limit=2g"} {
		assert.NoError(t, ValidFilter(spec), spec)
	}
	for spec, why := range map[string]string{
		"":                                       "not a filter spec",
		"blob":                                   "not a filter spec",
		"blob:none ":                             "not a filter spec",
		"--upload-pack=touch /tmp":               "not a filter spec",
		"blob:limit=":                            "a number of bytes",
		"blob:limit=-1":                          "a number of bytes",
		"blob:limit=1kk":                         "one unit at most",
		"blob:limit=1t":                          "a number of bytes",
		"blob:limit=99999999999999999999":        "a number of bytes",
		"blob:limit=1\n[core]":                   "a number of bytes",
		"tree:0":                                 "leaves out trees",
		"sparse:oid=main:f":                      "leaves out trees",
		"object:type=commit":                     "leaves out trees",
		"combine:blob:none+tree:1":               "leaves out trees",
		"blob:limit=" + strings.Repeat("9", 100): "at most 64",
	} {
		err := ValidFilter(spec)
		if assert.Error(t, err, "%q", spec) {
			assert.Contains(t, err.Error(), why, "%q", spec)
		}
	}
	_, err := Open(t.TempDir(), "https://example.com/r", Options{Filter: "blob:none"})
	assert.ErrorContains(t, err, "needs the git CLI")
	_, err = Open(t.TempDir(), "https://example.com/r", Options{Filter: "tree:0", GitCLI: "git"})
	assert.ErrorContains(t, err, "leaves out trees")
}

// A mirror with a Filter is git's partial clone over whatever transport
// the CLI speaks: commits and trees, ShallowDepth deep, and no file the
// server's filter left out, in promisor packs, through later fetches and
// a server that ignores filters gives a full mirror, without
// an error. A repository that borrows its objects and names the remote as
// its promisor checks out from it, fetching the files it lacks into its
// own promisor packs, as git-sync's --filter.
func TestFilterMirror(t *testing.T) {
	gitBin, err := exec.LookPath("git")
	require.NoError(t, err, "the tests need git")
	const big = 256 << 10
	for _, tc := range []struct {
		name    string
		filters bool
		url     func(*gittest.Repo) string
	}{
		{"http", true, (*gittest.Repo).URL},
		{"http, filters refused", false, (*gittest.Repo).URL},
		{"file", true, func(r *gittest.Repo) string { return "file://" + r.BareDir() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := gittest.NewServer(t)
			srv.SetFilters(tc.filters)
			repo := srv.NewRepo(t, "g/r")
			if tc.filters {
				// A local upload-pack reads the repository's own settings.
				repo.Git(t, "-C", repo.BareDir(), "config", "uploadpack.allowFilter", "true")
			}
			repo.Commit(t, "one", gittest.File("old", noise(t, big)))
			c2 := repo.Commit(t, "two", gittest.File("a/f", "f2\n"), gittest.File("big", noise(t, big)))

			dir := t.TempDir()
			m, err := Open(dir, tc.url(repo), Options{GitCLI: gitBin, Filter: "blob:none", ShallowDepth: 1})
			require.NoError(t, err)
			res, err := m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
			require.NoError(t, err)
			require.Equal(t, c2, res.Refs["refs/heads/main"].String())
			assert.True(t, m.Partial())
			assert.Equal(t, tc.filters, !has(t, m, c2, "big"), "the file the filter leaves out")
			assert.Equal(t, tc.filters, objectBytes(t, dir) < big/2)
			assert.False(t, m.HasCommit(mustHash(repo.Git(t, "rev-parse", "main~1"))), "one deep")
			promisors, _ := filepath.Glob(filepath.Join(dir, "objects", "pack", "*.promisor"))
			packs, _ := filepath.Glob(filepath.Join(dir, "objects", "pack", "*.pack"))
			assert.Len(t, promisors, len(packs), "every pack a promisor pack")
			_, err = m.TreeHash(ctxT(t), mustHash(c2), at("a"))
			require.NoError(t, err, "the trees are there")

			// The branch moves on: filtered again, one deep.
			c3 := repo.Commit(t, "three", gittest.File("big", noise(t, big)))
			res, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
			require.NoError(t, err)
			require.Equal(t, c3, res.Refs["refs/heads/main"].String())
			assert.Equal(t, tc.filters, !has(t, m, c3, "big"))
			shallow, err := os.ReadFile(filepath.Join(dir, "shallow"))
			require.NoError(t, err)
			assert.Contains(t, string(shallow), c3)

			// git's repack keeps every object of a promisor pack, reachable
			// or not: a trim would drop nothing, and is refused.
			_, err = m.Trim(ctxT(t), []gitutil.Hash{mustHash(c3)}, []string{"refs/heads/main"}, 1)
			assert.ErrorContains(t, err, "trim of a partial mirror")

			// git checks out c3 in a repository that borrows the mirror's
			// objects, fetching what the mirror lacks into its own store.
			root := t.TempDir()
			rgit := func(args ...string) string {
				t.Helper()
				cmd := exec.Command(gitBin, args...)
				cmd.Dir = root
				cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL="+os.DevNull, "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0")
				out, err := cmd.CombinedOutput()
				require.NoError(t, err, "git %v: %s", args, out)
				return string(out)
			}
			rgit("init", "-q")
			require.NoError(t, os.WriteFile(filepath.Join(root, ".git", "objects", "info", "alternates"), []byte(filepath.Join(dir, "objects")+"\n"), 0o644))
			shallow, err = os.ReadFile(filepath.Join(dir, "shallow"))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(root, ".git", "shallow"), shallow, 0o644))
			for _, kv := range [][2]string{{"core.repositoryformatversion", "1"}, {"extensions.partialClone", "origin"}, {"remote.origin.url", tc.url(repo)}, {"remote.origin.promisor", "true"}, {"remote.origin.partialclonefilter", "blob:none"}} {
				rgit("config", kv[0], kv[1])
			}
			rgit("-c", "user.name=x", "-c", "user.email=x@y", "checkout", "-q", "--detach", c3)
			data, err := os.ReadFile(filepath.Join(root, "big"))
			require.NoError(t, err)
			assert.Equal(t, repo.Git(t, "show", c3+":big"), string(data))
			own, _ := filepath.Glob(filepath.Join(root, ".git", "objects", "pack", "*.promisor"))
			assert.Equal(t, tc.filters, len(own) > 0, "the checkout's own files, fetched")
		})
	}
}

// A commit no ref names comes into an empty mirror with a Filter as
// refs do: filtered, from its promisor remote.
func TestFilterMirrorFetchCommit(t *testing.T) {
	gitBin, err := exec.LookPath("git")
	require.NoError(t, err, "the tests need git")
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "one", gittest.File("big", noise(t, 64<<10)))
	repo.Commit(t, "two", gittest.File("a", "2"))
	m, err := Open(t.TempDir(), repo.URL(), Options{GitCLI: gitBin, Filter: "blob:none", ShallowDepth: 1})
	require.NoError(t, err)
	res, err := m.FetchCommit(ctxT(t), nil, mustHash(c1))
	require.NoError(t, err)
	assert.Equal(t, c1, res.Refs["refs/modwatch/commits/"+c1].String())
	assert.True(t, m.Partial())
	assert.False(t, has(t, m, c1, "big"), "filtered")
}
