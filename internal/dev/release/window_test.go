package release_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/release"
)

// A minor is what a consumer on one Kubernetes minor pins: k8s.io/* at the
// minor's newest patch, the controller-runtime built against it, and
// companions: the fluxcd/pkg/ssa release made for the minor, which a
// controller on a later minor than the modules' floor requires with it.
// The floor's ssa (v0.64.0) imports autoscaling/v2beta2, and the
// fluxcd/cli-utils it requires imports scheduling/v1alpha1 through
// k8s.io/kubectl; k8s.io v0.36 removed both. A later ssa brings the
// cli-utils of its minor. On the floor's minor the consumer pins nothing
// more: what the modules require works. Helm needs no companion: the
// floor's v3.20.0 builds and passes at every minor of the window.
type minor struct {
	k8s, controllerRuntime string
	companions             map[string]string
}

// window is the Kubernetes minors the Kubernetes-facing modules support:
// the last three. The envtest suites (internal/dev/testenv) run at the last,
// the control plane's (testenv.KubernetesVersion); the modules' own go.mod
// files require the first's floor.
var window = []minor{
	{k8s: "v0.35.10", controllerRuntime: "v0.23.3"},
	{k8s: "v0.36.6", controllerRuntime: "v0.24.1", companions: map[string]string{
		"github.com/fluxcd/pkg/ssa": "v0.76.2",
	}},
	{k8s: "v0.37.2", controllerRuntime: "v0.25.2", companions: map[string]string{
		"github.com/fluxcd/pkg/ssa": "v0.78.0",
	}},
}

// pinned are the modules a Kubernetes controller pins to its minor.
func pinned(m minor) map[string]string {
	pins := map[string]string{
		"k8s.io/api":                     m.k8s,
		"k8s.io/apimachinery":            m.k8s,
		"k8s.io/client-go":               m.k8s,
		"k8s.io/apiextensions-apiserver": m.k8s,
		"sigs.k8s.io/controller-runtime": m.controllerRuntime,
	}
	for p, v := range m.companions {
		pins[p] = v
	}
	return pins
}

// consumerMain uses every pinned module directly, as a controller does,
// and every package of the modules under test.
func consumerMain(pkgs []string) string {
	var b strings.Builder
	b.WriteString("package main\n\nimport (\n")
	for _, p := range append([]string{
		"k8s.io/api/core/v1",
		"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1",
		"k8s.io/apimachinery/pkg/apis/meta/v1",
		"k8s.io/client-go/kubernetes",
		"sigs.k8s.io/controller-runtime",
	}, pkgs...) {
		fmt.Fprintf(&b, "\t_ %q\n", p)
	}
	b.WriteString(")\n\nfunc main() {}\n")
	return b.String()
}

// TestKubernetesWindow builds, for each supported minor, a consumer module
// that pins it and requires every Kubernetes-facing module (from this tree,
// by replace, as between releases): go mod tidy must leave every pin where
// it is, the consumer must build, and those modules' own tests (the ones
// that need no control plane) must pass at that minor.
func TestKubernetesWindow(t *testing.T) {
	t.Parallel() // see TestReleaseResolvesOutsideTheTree
	root := repoRoot(t)
	all, err := release.Modules(root)
	require.NoError(t, err)
	var kube []release.Module
	for _, m := range all {
		if m.Published() && m.Dir != "." {
			kube = append(kube, m)
		}
	}
	pkgs := packagesOf(t, root, kube)
	workspace := workspaceVersions(t, root, pinned(window[len(window)-1]))
	require.Equal(t, pinned(window[len(window)-1]), workspace, "the window's last minor is the workspace's, where the envtest suites run")
	for _, m := range window {
		t.Run(m.k8s, func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t, 30*time.Minute) // a hang's deadline: see TestReleaseResolvesOutsideTheTree
			dir := t.TempDir()
			var gomod strings.Builder
			gomod.WriteString("module example.com/consumer\n\ngo 1.26.0\n\nrequire (\n")
			pins := pinned(m)
			for _, p := range sortedMap(pins) {
				fmt.Fprintf(&gomod, "\t%s %s\n", p, pins[p])
			}
			for _, k := range kube {
				fmt.Fprintf(&gomod, "\t%s v0.0.0\n", k.Path)
			}
			gomod.WriteString(")\n\nreplace (\n")
			for _, o := range all {
				fmt.Fprintf(&gomod, "\t%s => %s\n", o.Path, filepath.Join(root, filepath.FromSlash(o.Dir)))
			}
			gomod.WriteString(")\n")
			require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod.String()), 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), treeSums(t, root), 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(consumerMain(pkgs)), 0o644))
			env := []string{"GOWORK=off", "GOFLAGS=-mod=mod"}
			// At the workspace's own minor, the consumer builds and tests
			// with the race detector, as make test's first phase does in
			// the workspace: the packages it compiles at the same versions
			// are then in the build cache already, not compiled again.
			flags := []string{}
			if maps.Equal(pins, workspace) {
				flags = append(flags, "-race")
			}

			run(t, ctx, dir, env, "go", "mod", "tidy")
			assertPins(t, dir, pins, "go mod tidy")
			run(t, ctx, dir, env, "go", append(append([]string{"build"}, flags...), "./...")...)
			// The modules' tests at this minor; go test adds their own
			// requirements (testify) to the consumer, never a pin. At the
			// workspace's minor, when the consumer selects every module
			// the tests build as the workspace does, they are make test's
			// own, run with the same flags by its first phase: not twice.
			tests := pkgs
			if maps.Equal(pins, workspace) {
				tests = differingTests(t, ctx, root, dir, env, pkgs)
			}
			out := "none: every one builds from the workspace's versions of every module, and make test's first phase runs it so"
			if len(tests) > 0 {
				out = run(t, ctx, dir, env, "go", append(append([]string{"test", "-count=1"}, flags...), tests...)...)
			}
			assertPins(t, dir, pins, "go test")
			after := requirements(t, dir)
			var got []string
			for _, p := range sortedMap(pins) {
				got = append(got, p+" "+pins[p]+" → "+after[p])
			}
			t.Logf("pinned → after go mod tidy and go test: %s; built; the modules' tests:\n%s", strings.Join(got, ", "), out)
		})
	}
}

// workspaceVersions is what the workspace selects of the modules that
// pins names.
func workspaceVersions(t *testing.T, root string, pins map[string]string) map[string]string {
	t.Helper()
	ctx := ctxT(t, 5*time.Minute)
	args := append([]string{"list", "-m", "-f", "{{.Path}} {{.Version}}"}, sortedMap(pins)...)
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(run(t, ctx, root, nil, "go", args...)), "\n") {
		if path, version, ok := strings.Cut(line, " "); ok {
			got[path] = version
		}
	}
	return got
}

func assertPins(t *testing.T, dir string, pins map[string]string, after string) {
	t.Helper()
	got := requirements(t, dir)
	for p, v := range pins {
		require.Equal(t, v, got[p], "%s moved %s from %s", after, p, v)
	}
}

// packagesOf lists the packages of mods (internal ones too: they are the
// modules' own).
func packagesOf(t *testing.T, root string, mods []release.Module) []string {
	t.Helper()
	ctx := ctxT(t, 5*time.Minute)
	var pkgs []string
	for _, m := range mods {
		out := run(t, ctx, filepath.Join(root, filepath.FromSlash(m.Dir)), nil, "go", "list", "-f", "{{if eq .Module.Path \""+m.Path+"\"}}{{.ImportPath}}{{end}}", "./...")
		pkgs = append(pkgs, strings.Fields(out)...)
	}
	require.NotEmpty(t, pkgs)
	return pkgs
}

func sortedMap(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// differingTests is those of pkgs whose tests, built in the consumer in
// dir, build from a version of some module other than the workspace's at
// root (the tree's own modules aside: the consumer has them by replace).
// The others' tests are make test's own, run with the same flags in its
// first phase: the same test binaries. Listing the tests' dependencies
// adds their requirements to the consumer, as go test does.
func differingTests(t *testing.T, ctx context.Context, root, dir string, env, pkgs []string) []string {
	t.Helper()
	consumer, workspace := testDeps(t, ctx, dir, env, pkgs), testDeps(t, ctx, root, nil, pkgs)
	var out []string
	for _, p := range pkgs {
		c, w := consumer[p], workspace[p]
		if !maps.Equal(c, w) {
			for m, v := range c {
				if w[m] != v {
					t.Logf("%s: its tests build from %s %s in the consumer, %q in the workspace: run here", p, m, v, w[m])
					break
				}
			}
			out = append(out, p)
		}
	}
	return out
}

// testDeps maps each package of pkgs that has tests to the module
// versions its test binary builds from, listed in dir.
func testDeps(t *testing.T, ctx context.Context, dir string, env, pkgs []string) map[string]map[string]string {
	t.Helper()
	module := map[string]string{} // package → "module version"
	args := append([]string{"list", "-deps", "-test", "-f", "{{.ImportPath}} {{with .Module}}{{.Path}} {{.Version}}{{end}}"}, pkgs...)
	for _, line := range strings.Split(strings.TrimSpace(run(t, ctx, dir, env, "go", args...)), "\n") {
		if f := strings.Fields(line); len(f) == 3 {
			module[f[0]] = f[1] + " " + f[2]
		}
	}
	out := map[string]map[string]string{}
	args = append([]string{"list", "-test", "-f", "{{.ImportPath}} {{join .Deps \" \"}}"}, pkgs...)
	for _, line := range strings.Split(strings.TrimSpace(run(t, ctx, dir, env, "go", args...)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasSuffix(f[0], ".test") {
			continue // the test binaries' main packages name every package they build
		}
		mods := map[string]string{}
		for _, d := range f[1:] {
			d, _, _ = strings.Cut(d, " ") // "p [p.test]"
			if path, version, ok := strings.Cut(module[d], " "); ok && !strings.HasPrefix(path, "github.com/modwatch/modwatch") {
				mods[path] = version
			}
		}
		out[strings.TrimSuffix(f[0], ".test")] = mods
	}
	return out
}
