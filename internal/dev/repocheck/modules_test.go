package repocheck_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// heavy are module path prefixes that a core-only program must not see.
var heavy = []string{"k8s.io/", "sigs.k8s.io/controller-runtime", "sigs.k8s.io/kustomize", "helm.sh/", "github.com/fluxcd/"}

// consumer is a program importing every core package.
const consumer = `package main

import (
	_ "github.com/modwatch/modwatch/gitutil"
	_ "github.com/modwatch/modwatch/gitutil/githubapp"
	_ "github.com/modwatch/modwatch/sink/dir"
	_ "github.com/modwatch/modwatch/sink/hook"
	_ "github.com/modwatch/modwatch/source/configmap"
	_ "github.com/modwatch/modwatch/source/static"
	_ "github.com/modwatch/modwatch/source/webhook"
	_ "github.com/modwatch/modwatch/watcher"
	_ "github.com/modwatch/modwatch/watcher/metrics"
	_ "github.com/modwatch/modwatch/watcher/credential"
	_ "github.com/modwatch/modwatch/watcher/payload"
	_ "github.com/modwatch/modwatch/watcher/signature"
	_ "github.com/modwatch/modwatch/watcher/watchertest"
)

func main() {}
`

func TestCoreModuleGraphIsKubernetesFree(t *testing.T) {
	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "the go command is needed to read a module graph")
	root, err := filepath.Abs("../../..")
	require.NoError(t, err)
	dir := t.TempDir()
	gomod := "module example.com/consumer\n\ngo 1.26.0\n\nrequire github.com/modwatch/modwatch v0.0.0\n\nreplace github.com/modwatch/modwatch => " + root + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(consumer), 0o644))
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))

	run := func(args ...string) []string {
		cmd := exec.Command(goBin, args...)
		cmd.Dir = dir
		// Outside the workspace. The core's graph is in the module cache
		// already (the core was built to run this); the checksums are the
		// core's go.sum, so no checksum database is asked.
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOSUMDB=off")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %s: %s", strings.Join(args, " "), out)
		return strings.Fields(string(out))
	}
	run("mod", "tidy") // as a consumer would: every module it builds from is required
	mods := run("list", "-m", "-f", "{{.Path}}", "all")
	pkgs := run("list", "-deps", ".")
	require.Contains(t, mods, "github.com/go-git/go-git/v5", "the graph was read")
	for _, m := range append(mods, pkgs...) {
		for _, h := range heavy {
			require.False(t, strings.HasPrefix(m, h), "%s is in a core-only program's module graph or build", m)
		}
	}
	t.Logf("a core-only program: %d modules in its graph, %d packages linked", len(mods), len(pkgs))
}
