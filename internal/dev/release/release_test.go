package release_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/release"
)

// The tree's published modules resolve outside it: no replace directive,
// no requirement on a module that is not published.
func TestPublishedModulesResolveOutsideTheTree(t *testing.T) {
	root := repoRoot(t)
	all, err := release.Modules(root)
	require.NoError(t, err)
	var published []string
	for _, m := range all {
		if m.Published() {
			published = append(published, m.Dir)
			assert.NoError(t, release.CheckPublishable(root, m, all))
		}
	}
	assert.Equal(t, []string{".", "sink/apply", "sink/apply/helm", "sink/fluxartifact", "sink/fluxreceiver", "source/flux", "source/gitsync", "watcher/cluster"}, published)
}

func TestCheckPublishableFindsWhatLeaks(t *testing.T) {
	root := t.TempDir()
	write := func(name, text string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, name), []byte(text), 0o644))
	}
	write("go.work", "go 1.26.0\n\nuse (\n\t.\n\t./a\n\t./internal/t\n)\n")
	write("go.mod", "module example.com/r\n\ngo 1.26.0\n")
	write("internal/t/go.mod", "module example.com/r/internal/t\n\ngo 1.26.0\n")
	write("a/go.mod", "module example.com/r/a\n\ngo 1.26.0\n\nrequire (\n\texample.com/r v0.1.0\n\texample.com/r/internal/t v0.0.0\n\texample.com/r/tools v0.0.0\n\texample.com/other v1.0.0\n)\n\nreplace example.com/r => ../\n")
	all, err := release.Modules(root)
	require.NoError(t, err)
	require.Len(t, all, 3)
	err = release.CheckPublishable(root, all[1], all)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "replaces example.com/r")
	assert.Contains(t, err.Error(), "requires example.com/r/internal/t, which is not published")
	assert.Contains(t, err.Error(), "requires example.com/r/tools, which is not published")
	assert.NotContains(t, err.Error(), "example.com/other")
	assert.NotContains(t, err.Error(), "requires example.com/r,")
	require.NoError(t, release.CheckPublishable(root, all[0], all))

	write("go.work", "go 1.26.0\n\nuse ../elsewhere\n")
	_, err = release.Modules(root)
	require.ErrorContains(t, err, "outside the repository")
}

// TestReleaseResolvesOutsideTheTree makes a release of a clone of this
// repository with the release command's own code, writes its module zips
// into a file-based module proxy, and has a consumer outside the tree
// require two of the released modules, tidy and build with no replace:
// the project's modules can come from nowhere but that proxy. Then it
// changes the clone's API and checks what the API check makes of it.
func TestReleaseResolvesOutsideTheTree(t *testing.T) {
	// Beside TestKubernetesWindow's minors: their builds' single-threaded
	// stretches (links, test runs) leave a core to the others.
	t.Parallel()
	// make test runs this at nice 19 beside the other tests: the deadline
	// catches a hang, and leaves room for the cores those tests take.
	ctx := ctxT(t, 30*time.Minute)
	root := repoRoot(t)
	tmp := t.TempDir()
	clone := filepath.Join(tmp, "repo")
	run(t, ctx, tmp, nil, "git", "clone", "-q", "--no-hardlinks", root, clone)
	// The clone's own identity (not the environment's: the test runs
	// beside the others, t.Parallel).
	run(t, ctx, clone, nil, "git", "config", "user.name", "release test")
	run(t, ctx, clone, nil, "git", "config", "user.email", "release@test")
	// A change since the last release: an exported function, and a line
	// for it in CHANGELOG.md.
	probe := filepath.Join(clone, "watcher", "zz_releaseprobe.go")
	require.NoError(t, os.WriteFile(probe, []byte("package watcher\n\n// ReleaseProbe is the release test's.\nfunc ReleaseProbe() {}\n"), 0o644))
	addUnreleased(t, clone, "- `watcher.ReleaseProbe`.")
	run(t, ctx, clone, nil, "git", "add", "-A")
	run(t, ctx, clone, nil, "git", "commit", "-q", "-m", "a change to release")

	const version = "v0.999.0"
	tags, err := release.Release(ctx, clone, version, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	require.NoError(t, err)
	assert.Equal(t, []string{"v0.999.0", "sink/apply/v0.999.0", "sink/apply/helm/v0.999.0", "sink/fluxartifact/v0.999.0", "sink/fluxreceiver/v0.999.0", "source/flux/v0.999.0", "source/gitsync/v0.999.0", "watcher/cluster/v0.999.0"}, tags)
	for _, tag := range tags {
		run(t, ctx, clone, nil, "git", "rev-parse", "--verify", "refs/tags/"+tag)
	}
	assert.Empty(t, run(t, ctx, clone, nil, "git", "status", "--porcelain"), "the release leaves a clean tree")
	assert.Contains(t, run(t, ctx, clone, nil, "git", "show", version+":sink/apply/helm/go.mod"), "github.com/modwatch/modwatch/sink/apply "+version)
	assert.Contains(t, run(t, ctx, clone, nil, "git", "show", version+":go.work"), "github.com/modwatch/modwatch/sink/apply "+version+" => ./sink/apply")
	_, err = release.Release(ctx, clone, version, time.Now())
	require.Error(t, err, "the same release twice")

	published, err := release.PublishedModules(clone)
	require.NoError(t, err)
	proxy := filepath.Join(tmp, "proxy")
	require.NoError(t, release.WriteProxy(ctx, clone, proxy, version, published))

	consumer := filepath.Join(tmp, "consumer")
	require.NoError(t, os.MkdirAll(consumer, 0o755))
	gomod := "module example.com/consumer\n\ngo 1.26.0\n\nrequire (\n\tgithub.com/modwatch/modwatch/sink/apply " + version + "\n\tgithub.com/modwatch/modwatch/source/gitsync " + version + "\n)\n"
	require.NoError(t, os.WriteFile(filepath.Join(consumer, "go.mod"), []byte(gomod), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(consumer, "go.sum"), treeSums(t, root), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(consumer, "main.go"), []byte("package main\n\nimport (\n\t_ \"github.com/modwatch/modwatch/sink/apply\"\n\t_ \"github.com/modwatch/modwatch/source/gitsync\"\n)\n\nfunc main() {}\n"), 0o644))
	// A module cache of its own, so that nothing of this tree's is in it.
	// Built with -trimpath: a package of the module cache is then known to
	// the build cache by its module and version, not by this temporary
	// directory, and the consumer's graph is compiled once per machine,
	// not at every run.
	// The project's modules come from the file proxy alone (no other proxy
	// has them, and GONOSUMDB keeps the checksum database from being
	// asked); the others from this machine's module cache, itself laid out
	// as a proxy, or, on a fresh machine that never needed the modules'
	// floor versions, from the module proxy the machine uses.
	cache := strings.TrimSpace(run(t, ctx, tmp, nil, "go", "env", "GOMODCACHE"))
	upstream := strings.TrimSpace(run(t, ctx, tmp, nil, "go", "env", "GOPROXY"))
	modcache := filepath.Join(tmp, "modcache")
	env := []string{
		"GOWORK=off", "GOFLAGS=-mod=mod -trimpath", "GOMODCACHE=" + modcache,
		"GOPROXY=file://" + proxy + ",file://" + filepath.Join(cache, "cache", "download") + "," + upstream,
		"GONOSUMDB=github.com/modwatch/modwatch", "GOTOOLCHAIN=local",
	}
	t.Cleanup(func() { _, _ = runErr(ctx, tmp, env, "go", "clean", "-modcache") })
	run(t, ctx, consumer, env, "go", "mod", "tidy")
	run(t, ctx, consumer, env, "go", "build", "./...")
	data, err := os.ReadFile(filepath.Join(consumer, "go.mod"))
	require.NoError(t, err)
	assert.NotContains(t, string(data), "replace")
	dir := strings.TrimSpace(run(t, ctx, consumer, env, "go", "list", "-m", "-f", "{{.Version}} {{.Dir}}", "github.com/modwatch/modwatch/source/gitsync"))
	assert.Equal(t, version+" "+filepath.Join(modcache, "github.com", "modwatch", "modwatch", "source", "gitsync@"+version), dir, "from the proxy's zip, not the tree")
	// What the go command downloaded of ours is the proxy's zip, byte for
	// byte.
	zipped, err := os.ReadFile(filepath.Join(proxy, "github.com", "modwatch", "modwatch", "source", "gitsync", "@v", version+".zip"))
	require.NoError(t, err)
	downloaded, err := os.ReadFile(filepath.Join(modcache, "cache", "download", "github.com", "modwatch", "modwatch", "source", "gitsync", "@v", version+".zip"))
	require.NoError(t, err)
	assert.Equal(t, zipped, downloaded)
	// The graph's size (go list -m all); -e because this offline cache has
	// the go.mod files of modules that provide no package, not their
	// .info files, which only that listing asks for.
	mods := strings.Fields(run(t, ctx, consumer, env, "go", "list", "-e", "-m", "-f", "{{.Path}}", "all"))
	t.Logf("a consumer of source/gitsync + sink/apply %s: %d modules in its graph (go list -m all)", version, len(mods))
	assert.NotContains(t, mods, "github.com/modwatch/modwatch/internal/dev/testenv")
	assert.Contains(t, mods, "github.com/fluxcd/pkg/ssa")

	// The API check against that release: the probe removed is
	// incompatible and must be named; another added is compatible.
	require.NoError(t, os.Remove(probe))
	require.NoError(t, os.WriteFile(filepath.Join(clone, "watcher", "zz_releaseprobe2.go"), []byte("package watcher\n\n// ReleaseProbeTwo is the release test's.\nfunc ReleaseProbeTwo() {}\n"), 0o644))
	// The root module's alone (the probes are in it): make api checks
	// every module at every run, and the others would be compiled in two
	// new folders here for nothing.
	v, changes, ok, err := release.SinceLastRelease(ctx, clone, "github.com/modwatch/modwatch")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, version, v)
	var got []string
	for _, c := range changes {
		got = append(got, c.String())
	}
	assert.Equal(t, []string{
		"INCOMPATIBLE: github.com/modwatch/modwatch/watcher: ReleaseProbe: removed",
		"compatible: github.com/modwatch/modwatch/watcher: ReleaseProbeTwo: added",
	}, got)
	notes, err := release.UnreleasedNotes(clone)
	require.NoError(t, err)
	missing := release.Undocumented(changes, notes)
	require.Len(t, missing, 1)
	assert.Equal(t, "watcher.ReleaseProbe", missing[0].Ident())
	addUnreleased(t, clone, "- Removed `watcher.ReleaseProbe`.")
	notes, err = release.UnreleasedNotes(clone)
	require.NoError(t, err)
	assert.Empty(t, release.Undocumented(changes, notes))
}

// addUnreleased adds line to the Unreleased section of root's CHANGELOG.md.
func addUnreleased(t *testing.T, root, line string) {
	t.Helper()
	name := filepath.Join(root, "CHANGELOG.md")
	data, err := os.ReadFile(name)
	require.NoError(t, err)
	text := strings.Replace(string(data), "## [Unreleased]\n", "## [Unreleased]\n\n"+line+"\n", 1)
	require.NotEqual(t, string(data), text, "CHANGELOG.md has an Unreleased heading")
	require.NoError(t, os.WriteFile(name, []byte(text), 0o644))
}
