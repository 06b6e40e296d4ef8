package repocheck_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNoSidewaysImports keeps the layering: a target's way from a source to
// a sink is one-directional, so no source imports a sink and no sink a
// source (what both need lives below them: watcher, watcher/payload,
// watcher/credential, watcher/signature, gitutil). Tests and examples may use both.
func TestNoSidewaysImports(t *testing.T) {
	const root = "github.com/modwatch/modwatch/"
	cmd := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, root+"source/...", root+"sink/...")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg := f[0]
		var forbidden string
		switch {
		case strings.HasPrefix(pkg, root+"source/"):
			forbidden = root + "sink/"
		case strings.HasPrefix(pkg, root+"sink/"):
			forbidden = root + "source/"
		default:
			continue
		}
		checked++
		for _, imp := range f[1:] {
			require.False(t, strings.HasPrefix(imp, forbidden), "%s imports %s: put what both need below them", pkg, imp)
		}
	}
	require.Greater(t, checked, 10, "the sources and sinks were listed")
	t.Logf("%d source and sink packages import no package of the other side", checked)
}

// TestLibraryImportsNoDevelopmentTool keeps internal/ in two: the
// library's own private helpers directly under it (backoff, filewatch,
// procgroup, safefile), which shipped packages import, and the
// development tools under internal/dev (benchmarks, the envtest harness,
// the test control plane, the release tools, git servers for tests), which
// import everything and which no shipped package may import.
func TestLibraryImportsNoDevelopmentTool(t *testing.T) {
	const root = "github.com/modwatch/modwatch/"
	var pkgs []string
	for _, lib := range []string{"watcher/...", "source/...", "sink/...", "gitutil/...", "internal/backoff", "internal/filewatch", "internal/procgroup", "internal/safefile"} {
		pkgs = append(pkgs, root+lib)
	}
	cmd := exec.Command("go", append([]string{"list", "-deps", "-f", `{{.ImportPath}}`}, pkgs...)...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	deps := strings.Fields(string(out))
	ours := 0
	for _, dep := range deps {
		if strings.HasPrefix(dep, root) {
			ours++
		}
		require.False(t, strings.HasPrefix(dep, root+"internal/dev/"), "a library package depends on the development tool %s", dep)
	}
	require.Greater(t, ours, 30, "the library's packages were listed")
	t.Logf("%d packages of the library and what they import: none under internal/dev", ours)
}
