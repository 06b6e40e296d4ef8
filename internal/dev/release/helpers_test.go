package release_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/mod/modfile"
)

// repoRoot is the repository this package is in.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../../..")
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(root, "go.work"))
	return root
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// run runs name args in dir with env added, and returns its output; it
// fails the test when the command does.
func run(t *testing.T, ctx context.Context, dir string, env []string, name string, args ...string) string {
	t.Helper()
	out, err := runErr(ctx, dir, env, name, args...)
	require.NoError(t, err, "%s %s (in %s):\n%s", name, strings.Join(args, " "), dir, out)
	return out
}

func runErr(ctx context.Context, dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// requirements reads the require lines of the go.mod in dir.
func requirements(t *testing.T, dir string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	require.NoError(t, err)
	f, err := modfile.Parse("go.mod", data, nil)
	require.NoError(t, err)
	req := map[string]string{}
	for _, r := range f.Require {
		req[r.Mod.Path] = r.Mod.Version
	}
	return req
}

// treeSums is every go.sum line of the repository's modules: a consumer
// seeded with them asks the checksum database only for what the tree does
// not use.
func treeSums(t *testing.T, root string) []byte {
	t.Helper()
	var all []byte
	for _, name := range []string{"go.sum", "go.work.sum"} {
		matches, _ := filepath.Glob(filepath.Join(root, name))
		more, _ := filepath.Glob(filepath.Join(root, "*", "*", name))
		deeper, _ := filepath.Glob(filepath.Join(root, "*", "*", "*", name))
		for _, m := range append(append(matches, more...), deeper...) {
			data, err := os.ReadFile(m)
			require.NoError(t, err)
			all = append(all, data...)
		}
	}
	return all
}
