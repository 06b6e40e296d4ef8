package release

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/types"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/exp/apidiff"
	"golang.org/x/tools/go/packages"
)

// An APIChange is one difference in the exported API of a published
// package between two trees.
type APIChange struct {
	Package    string // import path
	Name       string // the package's name
	Message    string // apidiff's, "Config.Prune: removed"; "package removed" for the package
	Compatible bool
}

func (c APIChange) String() string {
	kind := "compatible"
	if !c.Compatible {
		kind = "INCOMPATIBLE"
	}
	return fmt.Sprintf("%s: %s: %s", kind, c.Package, c.Message)
}

// Ident is what a CHANGELOG entry names for c: the package's name and the
// top-level identifier changed ("apply.Config" for "Config.Prune:
// removed", "mirror.Mirror" for "(*Mirror).Close: removed"), or the
// import path of a package added or removed. A method promoted from a type
// of another package that c's package embeds is named by that type
// ("spec.GitSync" for "github.com/x/spec.GitSync.Render: changed").
func (c APIChange) Ident() string {
	if c.Message == "package removed" || c.Message == "package added" {
		return c.Package
	}
	s, _, _ := strings.Cut(c.Message, ":")
	s = strings.TrimLeft(s, "(*")
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		pkg, rest, _ := strings.Cut(s[i+1:], ".")
		typ, _, _ := strings.Cut(rest, ".")
		return pkg + "." + typ
	}
	if i := strings.IndexAny(s, ".)[,"); i >= 0 {
		s = s[:i]
	}
	return c.Name + "." + s
}

// diffAPI compares two sets of packages by import path.
func diffAPI(oldPkgs, newPkgs map[string]*types.Package) []APIChange {
	var changes []APIChange
	for _, path := range sortedKeys(oldPkgs, newPkgs) {
		o, n := oldPkgs[path], newPkgs[path]
		switch {
		case n == nil:
			changes = append(changes, APIChange{Package: path, Name: o.Name(), Message: "package removed"})
		case o == nil:
			changes = append(changes, APIChange{Package: path, Name: n.Name(), Message: "package added", Compatible: true})
		default:
			for _, c := range apidiff.Changes(o, n).Changes {
				changes = append(changes, APIChange{Package: path, Name: n.Name(), Message: c.Message, Compatible: c.Compatible})
			}
		}
	}
	return changes
}

// Undocumented are the incompatible changes that unreleased (the
// CHANGELOG's Unreleased section) does not name by their Ident.
func Undocumented(changes []APIChange, unreleased string) []APIChange {
	var out []APIChange
	for _, c := range changes {
		if !c.Compatible && !strings.Contains(unreleased, c.Ident()) {
			out = append(out, c)
		}
	}
	return out
}

// loadAPI type-checks the exported packages of mods in the workspace at
// root, keyed by import path.
func loadAPI(ctx context.Context, root string, mods []Module) (map[string]*types.Package, error) {
	// Offline first: the trees' modules and what they require are in the
	// workspace and the module cache, and a lookup of a version that is
	// nowhere (the release being made) waits on the network for minutes.
	// Should something be missing from the cache, the load is made again
	// with the network.
	out, err := loadAPIWith(ctx, root, mods, "GOPROXY=off")
	if err != nil {
		out, err = loadAPIWith(ctx, root, mods)
	}
	return out, err
}

// loadAPIWith loads the types of mods' packages in root, with env added to
// the go command's.
func loadAPIWith(ctx context.Context, root string, mods []Module, env ...string) (map[string]*types.Package, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	out := map[string]*types.Package{}
	var errs []string
	for _, m := range mods {
		cfg := &packages.Config{
			Context: ctx,
			Mode:    packages.NeedName | packages.NeedTypes | packages.NeedModule,
			Dir:     filepath.Join(abs, filepath.FromSlash(m.Dir)),
			Env:     append(append(os.Environ(), "GOWORK="+filepath.Join(abs, "go.work"), "GOFLAGS="), env...),
		}
		pkgs, err := packages.Load(cfg, "./...")
		if err != nil {
			return nil, err
		}
		for _, p := range pkgs {
			if p.Module == nil || p.Module.Path != m.Path || isInternal(p.PkgPath) || p.Name == "main" {
				continue
			}
			for _, e := range p.Errors {
				errs = append(errs, e.Error())
			}
			out[p.PkgPath] = p.Types
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return out, nil
}

func isInternal(path string) bool {
	return strings.HasSuffix(path, "/internal") || strings.Contains(path, "/internal/")
}

func sortedKeys(ms ...map[string]*types.Package) []string {
	seen := map[string]bool{}
	var keys []string
	for _, m := range ms {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	sort.Strings(keys)
	return keys
}

// SinceLastRelease compares the exported API of the published modules at
// root with the last release CHANGELOG.md names (ok is false before the
// first): those named by their paths in only, or all when only is empty.
// The release's tree is read from its commit, which the clone must hold;
// tags are not needed.
func SinceLastRelease(ctx context.Context, root string, only ...string) (version string, changes []APIChange, ok bool, err error) {
	cl, err := readChangelog(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		return "", nil, false, err
	}
	version, commit, ok, err := cl.LastRelease()
	if err != nil || !ok {
		return version, nil, false, err
	}
	if _, err := git(ctx, root, "cat-file", "-e", commit+"^{commit}"); err != nil {
		return version, nil, false, fmt.Errorf("CHANGELOG.md says %s is commit %s, which this clone does not have (a shallow clone? fetch its history): %w", version, commit, err)
	}
	old, err := releaseTree(ctx, root, commit)
	if err != nil {
		return version, nil, false, err
	}
	// Both trees' published modules, as each names them.
	oldMods, err := PublishedModules(old)
	if err != nil {
		return version, nil, false, err
	}
	newMods, err := PublishedModules(root)
	if err != nil {
		return version, nil, false, err
	}
	if len(only) > 0 {
		named := func(m Module) bool { return !slices.Contains(only, m.Path) }
		oldMods, newMods = slices.DeleteFunc(oldMods, named), slices.DeleteFunc(newMods, named)
	}
	oldPkgs, err := loadAPI(ctx, old, oldMods)
	if err != nil {
		return version, nil, false, fmt.Errorf("%s (%s): %w", version, commit[:12], err)
	}
	newPkgs, err := loadAPI(ctx, root, newMods)
	if err != nil {
		return version, nil, false, err
	}
	return version, diffAPI(oldPkgs, newPkgs), true, nil
}

// releaseTree is the tree of commit (a release's), extracted once per
// machine into the user's cache folder (modwatch/release-api/<commit>),
// so that its packages' compiled export data, which the build cache keys
// by their folder too, are compiled once, not at every API check. A tree
// is put in place whole (extracted beside, then renamed), and never
// changed: a commit's tree is a commit's. Without a user cache folder,
// the system's temporary folder holds the trees, kept and pruned alike.
func releaseTree(ctx context.Context, root, commit string) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	base := filepath.Join(cache, "modwatch", "release-api")
	dir := filepath.Join(base, commit)
	if _, err := os.Stat(dir); err == nil {
		now := time.Now()
		_ = os.Chtimes(dir, now, now) // used: the last kept
		return dir, nil
	}
	defer pruneTrees(base, keptTrees)
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(base, ".extract-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp) // what a failure or a lost race leaves
	if err := extract(ctx, root, commit, tmp); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(dir); serr == nil {
			return dir, nil // another check put it in place first
		}
		return "", err
	}
	return dir, nil
}

// keptTrees is how many release trees releaseTree keeps: the last used.
// (The release test checks a new release at every run.)
const keptTrees = 4

// pruneTrees removes the trees in base past the keep last used.
func pruneTrees(base string, keep int) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	type tree struct {
		name string
		used time.Time
	}
	var trees []tree
	for _, e := range entries {
		if info, err := e.Info(); err == nil && e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			trees = append(trees, tree{e.Name(), info.ModTime()})
		}
	}
	sort.Slice(trees, func(i, j int) bool { return trees[i].used.After(trees[j].used) })
	for _, t := range trees[min(keep, len(trees)):] {
		_ = os.RemoveAll(filepath.Join(base, t.name))
	}
}

// extract writes the tree of commit into dir (git archive | tar -x).
func extract(ctx context.Context, root, commit, dir string) error {
	archive := exec.CommandContext(ctx, "git", "archive", "--format=tar", commit)
	archive.Dir = root
	untar := exec.CommandContext(ctx, "tar", "-x", "-C", dir)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return err
	}
	untar.Stdin = pipe
	// One buffer each: the two processes write at once.
	var archiveErr, untarErr bytes.Buffer
	archive.Stderr, untar.Stderr = &archiveErr, &untarErr
	if err := archive.Start(); err != nil {
		return err
	}
	errUntar := untar.Run()
	errArchive := archive.Wait()
	if err := errors.Join(errArchive, errUntar); err != nil {
		return fmt.Errorf("git archive %s | tar -x: %w: %s %s", commit, err, bytes.TrimSpace(archiveErr.Bytes()), bytes.TrimSpace(untarErr.Bytes()))
	}
	return nil
}
