package release

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/mod/modfile"
)

// Module is one module of the repository.
type Module struct {
	Path string // its module path
	Dir  string // its directory, slash-separated, relative to the repository root ("." for the root)
}

// Published reports whether m is released to users: examples and what is
// under internal/ are the project's own.
func (m Module) Published() bool {
	return m.Dir != "examples" && !strings.HasPrefix(m.Dir, "examples/") &&
		m.Dir != "internal" && !strings.HasPrefix(m.Dir, "internal/")
}

// Tag is the Git tag of m's release at version: version itself at the
// repository root, "<dir>/<version>" for a nested module, as the go command
// looks for them.
func (m Module) Tag(version string) string {
	if m.Dir == "." {
		return version
	}
	return m.Dir + "/" + version
}

// Modules reads the modules of the workspace at root (its go.work), in the
// order go.work names them.
func Modules(root string) ([]Module, error) {
	data, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		return nil, err
	}
	wf, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		return nil, err
	}
	var mods []Module
	for _, u := range wf.Use {
		dir := path.Clean(filepath.ToSlash(u.Path))
		if path.IsAbs(dir) || dir == ".." || strings.HasPrefix(dir, "../") {
			return nil, fmt.Errorf("go.work: %s is outside the repository", u.Path)
		}
		gomod, err := readModFile(root, dir)
		if err != nil {
			return nil, err
		}
		mods = append(mods, Module{Path: gomod.Module.Mod.Path, Dir: dir})
	}
	return mods, nil
}

// PublishedModules is Modules without the unpublished ones.
func PublishedModules(root string) ([]Module, error) {
	all, err := Modules(root)
	if err != nil {
		return nil, err
	}
	var pub []Module
	for _, m := range all {
		if m.Published() {
			pub = append(pub, m)
		}
	}
	return pub, nil
}

func readModFile(root, dir string) (*modfile.File, error) {
	name := filepath.Join(root, filepath.FromSlash(dir), "go.mod")
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	f, err := modfile.Parse(name, data, nil)
	if err != nil {
		return nil, err
	}
	if f.Module == nil {
		return nil, fmt.Errorf("%s: no module line", name)
	}
	return f, nil
}

// CheckPublishable reports what keeps the published module m at root from
// resolving outside the tree: a replace directive, or a requirement on a
// module of this repository that is not published (an internal one, the
// examples, one that go.work does not name).
func CheckPublishable(root string, m Module, all []Module) error {
	f, err := readModFile(root, m.Dir)
	if err != nil {
		return err
	}
	published := map[string]bool{}
	prefix := "\x00"
	for _, o := range all {
		published[o.Path] = o.Published()
		if o.Dir == "." {
			prefix = o.Path
		}
	}
	var problems []string
	for _, r := range f.Replace {
		problems = append(problems, "replaces "+r.Old.Path)
	}
	for _, r := range f.Require {
		p := r.Mod.Path
		if (p == prefix || strings.HasPrefix(p, prefix+"/")) && !published[p] {
			problems = append(problems, "requires "+p+", which is not published")
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s (%s/go.mod): %s", m.Path, m.Dir, strings.Join(problems, "; "))
	}
	return nil
}
