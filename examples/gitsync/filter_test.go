package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
)

// packedObjects lists the objects of the packs in a repository's own
// object store (not its alternates'), read from their indexes.
func packedObjects(t *testing.T, gitDir string) map[string]bool {
	t.Helper()
	idxs, err := filepath.Glob(filepath.Join(gitDir, "objects", "pack", "*.idx"))
	require.NoError(t, err)
	objects := map[string]bool{}
	for _, idx := range idxs {
		data, err := os.ReadFile(idx)
		require.NoError(t, err)
		cmd := exec.Command("git", "show-index")
		cmd.Stdin = bytes.NewReader(data)
		out, err := cmd.Output()
		require.NoError(t, err)
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if f := strings.Fields(line); len(f) >= 2 {
				objects[f[1]] = true
			}
		}
	}
	return objects
}

// With --filter the mirror fetches commits and trees (the server allows
// filters), and root, a partial clone of the repository, fetches the
// files its sparse checkout reads into promisor packs of its own, with
// the repository's credentials, never written to disk: the files outside
// the checkout are fetched by no one, commit after commit (the second
// synced by a running program, stopped before its stores are read).
func TestFilterFetchesWhatTheCheckoutReads(t *testing.T) {
	const secret = "filter-s3cret"
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/mono")
	big := strings.Repeat("0123456789abcdef", 16<<10)
	c1 := repo.Commit(t, "1", gittest.File("keep/f", "1"), gittest.File("skip/big", big))
	srv.SetBasicAuth("robot", secret)
	dir := t.TempDir()
	sparse, pw := filepath.Join(dir, "sparse"), filepath.Join(dir, "pw")
	require.NoError(t, os.WriteFile(sparse, []byte("/keep/\n"), 0o644))
	require.NoError(t, os.WriteFile(pw, []byte(secret), 0o600))
	root := filepath.Join(dir, "root")
	args := []string{"--repo", repo.URL(), "--root", root, "--link", "link", "--filter", "blob:none", "--sparse-checkout-file", sparse,
		"--username", "robot", "--password-file", pw}

	var out bytes.Buffer
	require.Equal(t, 0, run(context.Background(), append(args, "--one-time"), noEnv, &out), out.String())
	checkFiltered(t, repo, root, c1, "1")

	c2 := repo.Commit(t, "2", gittest.File("keep/f", "2"), gittest.File("skip/big", big+"2"))
	p := start(t, append(args, "--period", "50ms", "--max-failures", "-1")...)
	require.Eventually(t, func() bool {
		target, _ := os.Readlink(filepath.Join(root, "link"))
		return target == filepath.Join(".worktrees", c2)
	}, 30*time.Second, 20*time.Millisecond, p.stderr.String())
	assert.Equal(t, 0, p.stop(), p.stderr.String())
	checkFiltered(t, repo, root, c2, "2")

	promisors, _ := filepath.Glob(filepath.Join(root, ".git", "objects", "pack", "*.promisor"))
	assert.NotEmpty(t, promisors)
	assert.NotContains(t, out.String()+p.stderr.String(), secret)
	assert.NotContains(t, out.String()+p.stderr.String(), "cleanup failed", "a partial mirror is not trimmed")
	assertNotOnDisk(t, root, secret)
}

// checkFiltered checks root's link at commit c, whose keep/f holds want:
// the mirror holds its commit and trees and no file; root holds the file
// it checked out, and not the one outside its sparse checkout.
func checkFiltered(t *testing.T, repo *gittest.Repo, root, c, want string) {
	t.Helper()
	target, _ := os.Readlink(filepath.Join(root, "link"))
	require.Equal(t, filepath.Join(".worktrees", c), target)
	data, err := os.ReadFile(filepath.Join(root, "link", "keep", "f"))
	require.NoError(t, err)
	assert.Equal(t, want, string(data))
	assert.NoDirExists(t, filepath.Join(root, "link", "skip"))
	mirrors, _ := filepath.Glob(filepath.Join(root, ".mirrors", "*", "objects"))
	require.Len(t, mirrors, 1)
	mirror := packedObjects(t, filepath.Dir(mirrors[0]))
	own := packedObjects(t, filepath.Join(root, ".git"))
	kept, skipped := repo.Git(t, "rev-parse", c+":keep/f"), repo.Git(t, "rev-parse", c+":skip/big")
	assert.True(t, mirror[c] && mirror[repo.Git(t, "rev-parse", c+"^{tree}")], "the mirror has the commit and its trees")
	assert.False(t, mirror[kept] || mirror[skipped], "and no file")
	assert.True(t, own[kept], "root fetched the file it checked out")
	assert.False(t, own[skipped], "and no other")
}
