package mirror

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
)

// The path diff lists what git itself lists (git diff --name-only, no
// renames), over random histories that add, change and delete files,
// links and executables, and turn files into directories and back.
func TestChangedPathsAgreesWithGit(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	rng := rand.New(rand.NewPCG(7, 11))
	names := []string{"a", "b", "c"}
	randomPath := func() string {
		parts := make([]string, 1+rng.IntN(3))
		for i := range parts {
			parts[i] = names[rng.IntN(len(names))]
		}
		return strings.Join(parts, "/")
	}
	edit := func(_ gittest.TB, work string) {
		for range 1 + rng.IntN(4) {
			rel := randomPath()
			p := filepath.Join(work, filepath.FromSlash(rel))
			// Make room: a file where a directory is wanted goes, and so
			// does a directory where a file is.
			for dir := filepath.Dir(p); dir != work; dir = filepath.Dir(dir) {
				if fi, err := os.Lstat(dir); err == nil && !fi.IsDir() {
					require.NoError(t, os.Remove(dir))
				}
			}
			require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
			switch op := rng.IntN(5); {
			case op == 0:
				require.NoError(t, os.RemoveAll(p))
			case op == 1:
				require.NoError(t, os.RemoveAll(p))
				require.NoError(t, os.Symlink(names[rng.IntN(len(names))], p))
			default:
				require.NoError(t, os.RemoveAll(p))
				mode := os.FileMode(0o644)
				if op == 2 {
					mode = 0o755
				}
				require.NoError(t, os.WriteFile(p, []byte{byte('0' + rng.IntN(3))}, mode))
			}
		}
	}
	commits := []string{repo.Commit(t, "seed", gittest.File("a/a", "0"), gittest.File("b", "0"))}
	for i := range 40 {
		commits = append(commits, repo.Commit(t, "edit "+string(rune('0'+i%10)), edit))
	}
	m, err := Open(t.TempDir(), repo.URL(), Options{})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)

	compared := 0
	for i := 1; i < len(commits); i++ {
		for _, path := range []string{"", "a", "a/b"} {
			from, to := commits[rng.IntN(i)], commits[i]
			got, err := m.ChangedPaths(ctxT(t), mustHash(from), mustHash(to), at(path))
			if errors.Is(err, ErrPathNotFound) {
				continue
			}
			require.NoError(t, err, "%s..%s at %q", from[:7], to[:7], path)
			if kind := repo.Git(t, "cat-file", "-t", to+":"+path); kind != "tree" {
				continue // a file target: one path, its name
			}
			args := []string{"diff", "--no-renames", "--name-only", from, to}
			if path != "" {
				args = append(args, "--", path)
			}
			var want []string
			for _, l := range strings.Split(repo.Git(t, args...), "\n") {
				if path == "" && l != "" {
					want = append(want, l)
				} else if rel, ok := strings.CutPrefix(l, path+"/"); ok {
					want = append(want, rel) // not path itself: a file there before is not in the directory
				}
			}
			slices.Sort(want)
			if want == nil {
				want = []string{}
			}
			assert.Equal(t, want, got, "%s..%s at %q", from[:7], to[:7], path)
			compared++
		}
	}
	assert.Greater(t, compared, 60)
}
