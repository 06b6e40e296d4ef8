package repocheck_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// libraryRoots are the directories whose packages (and those below them)
// are the library: what a program imports. Examples, tests and the
// repository's own tools (internal/dev/bench, testenv, gittest, release,
// testbin, crashtest, upstream, repocheck) are not.
var libraryRoots = []string{
	"watcher", "source", "sink", "gitutil",
	"internal/backoff", "internal/filewatch", "internal/procgroup", "internal/safefile",
}

// stateAllowed are the package-level variables of the library that are
// neither sentinel errors nor compile-time checks, each reviewed: a value
// set once at init and never written after, of a kind Go cannot make a
// constant. A new one needs a line here, with its reason.
var stateAllowed = map[string]string{
	"gitutil.ZeroHash":                   "exported zero Hash, never written: Go has no array constants",
	"gitutil.defaultPorts":               "scheme → default port table, read only",
	"sink/apply.Raw":                     "exported Renderer, a func adapter: no state",
	"sink/apply/kustomize.pathFields":    "kustomization field names, read only",
	"sink/fluxartifact.cleared":          "Flux condition types, read only",
	"sink/fluxreceiver.ReceiverGVR":      "exported resource name, read only",
	"sink/fluxreceiver.SecretGVR":        "exported resource name, read only",
	"source/configmap.topKeys":           "configuration key names, read only",
	"source/flux.versions":               "GitRepository versions, read only",
	"source/flux.ignoreVCS":              "Flux's exclusions, read only",
	"source/flux.ignoreDefault":          "Flux's exclusions, read only",
	"source/gitsync.GVR":                 "exported resource name, read only",
	"source/gitsync.statusElement":       "a field path element, read only",
	"source/gitsync.commitStatusElement": "a field path element, read only",
	"source/gitsync.zeroFields":          "field → zero value table, read only",
	"source/gitsync.knownKeys":           "configuration key names, read only",
	"watcher.jobLists":                   "a sync.Pool of cleared scratch slices: it holds nothing learned",
	"watcher.ErrCacheDirInUse":           "the sentinel error of watcher/internal/cachedir, exported under the watcher's name for errors.Is: never written",
	"watcher/cluster.conflictBackoff":    "retry schedule, read only (copied by each use)",
}

// Library packages keep no mutable package state (STYLE.md §9): what a
// process learns (of remotes, servers, caches) lives on a value that its
// owner holds and bounds, so that two owners in one process share nothing
// and nothing grows with every URL a process ever saw.
//
// The rule, for every package-level var of every non-test file of the
// library: it is allowed when
//   - every name it declares is _ (a compile-time interface check), or
//   - each name's value is a call to errors.New or fmt.Errorf (a sentinel
//     error, documented for errors.Is), or to regexp.MustCompile (a
//     compiled expression, immutable and safe for concurrent use), or
//   - it is in stateAllowed, with its reason.
//
// Everything else fails: sync.Map, maps, slices, pointers, mutexes,
// counters, and a var that aliases another package's value.
func TestNoMutablePackageState(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	var found []string
	files := 0
	for _, lib := range libraryRoots {
		err := filepath.WalkDir(filepath.Join(root, lib), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			files++
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			bad, err := mutableVars(filepath.ToSlash(rel), path, src)
			found = append(found, bad...)
			return err
		})
		require.NoError(t, err)
	}
	require.Greater(t, files, 100, "the library's files were read")
	slices.Sort(found)
	assert.Empty(t, found, "package-level state in a library package: put it on a value, make it a func or a const, or allow it in stateAllowed with a reason")
}

// mutableVars returns the package-level vars of the file that the rule of
// TestNoMutablePackageState refuses, as "pkg.name (file:line)"; pkg is
// the package's directory relative to the repository's root.
func mutableVars(pkg, name string, src []byte) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var bad []string
	for _, decl := range f.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.VAR {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, id := range vs.Names {
				if id.Name == "_" {
					continue
				}
				if i < len(vs.Values) && isSentinel(vs.Values[i]) {
					continue
				}
				if _, ok := stateAllowed[pkg+"."+id.Name]; ok {
					continue
				}
				bad = append(bad, fmt.Sprintf("%s.%s (%s)", pkg, id.Name, fset.Position(id.Pos())))
			}
		}
	}
	return bad, nil
}

// isSentinel reports whether e is errors.New(...), fmt.Errorf(...) or
// regexp.MustCompile(...).
func isSentinel(e ast.Expr) bool {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	switch {
	case !ok:
		return false
	case pkg.Name == "errors" && sel.Sel.Name == "New", pkg.Name == "fmt" && sel.Sel.Name == "Errorf":
		return true
	}
	return pkg.Name == "regexp" && sel.Sel.Name == "MustCompile"
}

// The rule itself, on the kinds of declaration it is about.
func TestMutableVarsRule(t *testing.T) {
	for _, tc := range []struct {
		name string
		decl string
		bad  []string
	}{
		{"a sentinel error", `var ErrX = errors.New("p: x")`, nil},
		{"a wrapped sentinel", `var ErrY = fmt.Errorf("%w: y", ErrX)`, nil},
		{"a compile-time check", `var _ I = (*T)(nil)`, nil},
		{"a compiled regexp", "var name = regexp.MustCompile(`^[a-z]+$`)", nil},
		{"a group of sentinels", "var (\n\tErrA = errors.New(\"a\")\n\tErrB = errors.New(\"b\")\n)", nil},
		{"a sync.Map", `var seen sync.Map`, []string{"p.seen"}},
		{"a map", `var headers = map[string]string{"a": "b"}`, []string{"p.headers"}},
		{"a slice", `var names = []string{"a"}`, []string{"p.names"}},
		{"a counter", `var n int`, []string{"p.n"}},
		{"a mutex", `var mu sync.Mutex`, []string{"p.mu"}},
		{"an alias of another package's value", `var errNoV2 = protov2.ErrNoV2`, []string{"p.errNoV2"}},
		{"a pointer", `var noAuth = &Auth{}`, []string{"p.noAuth"}},
		{"two names, one bad", `var ErrC, d = errors.New("c"), 0`, []string{"p.d"}},
		{"allowed with a reason", `var ZeroHash Hash`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pkg := "p"
			if tc.name == "allowed with a reason" {
				pkg = "gitutil"
			}
			bad, err := mutableVars(pkg, "x.go", []byte("package p\n\n"+tc.decl+"\n"))
			require.NoError(t, err)
			var names []string
			for _, b := range bad {
				names = append(names, strings.Fields(b)[0])
			}
			assert.Equal(t, tc.bad, names)
		})
	}
}
