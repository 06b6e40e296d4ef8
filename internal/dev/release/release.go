package release

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
)

// Release makes version at the repository root: every module's
// requirements on the published modules set to version, the tree checked
// (Check), CHANGELOG.md's Unreleased section moved under version, one
// commit, a tag per published module, then a second commit recording in
// CHANGELOG.md the commit the release was made from. It returns the tags.
// The working tree must be clean; nothing is pushed.
func Release(ctx context.Context, root, version string, now time.Time) ([]string, error) {
	all, cut, tags, err := prepare(ctx, root, version, now)
	if err != nil {
		return nil, err
	}
	clPath := filepath.Join(root, "CHANGELOG.md")
	if err := SetRequirements(root, all, version); err != nil {
		return nil, err
	}
	if err := os.WriteFile(clPath, cut, 0o644); err != nil {
		return nil, err
	}
	if err := Check(ctx, root); err != nil {
		return nil, fmt.Errorf("the tree at %s does not check (left as it is, uncommitted): %w", version, err)
	}
	if _, err := git(ctx, root, "commit", "-q", "-a", "-m", "Release "+version); err != nil {
		return nil, err
	}
	commit, err := git(ctx, root, "rev-parse", "HEAD")
	if err != nil {
		return nil, err
	}
	for _, t := range tags {
		if _, err := git(ctx, root, "tag", "-a", "-m", "Release "+version, t, commit); err != nil {
			return nil, err
		}
	}
	cl, err := readChangelog(clPath)
	if err != nil {
		return nil, err
	}
	recorded, err := cl.Record(version, commit, tags)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(clPath, recorded, 0o644); err != nil {
		return nil, err
	}
	if _, err := git(ctx, root, "commit", "-q", "-m", "CHANGELOG: "+version+" is commit "+commit[:12], "--", "CHANGELOG.md"); err != nil {
		return nil, err
	}
	return tags, nil
}

// prepare checks that version can be released from root (a clean tree, a
// newer version, something Unreleased, no tag taken) and returns the
// modules, CHANGELOG.md cut at version, and the tags to make.
func prepare(ctx context.Context, root, version string, now time.Time) (all []Module, cut []byte, tags []string, err error) {
	if out, err := git(ctx, root, "status", "--porcelain"); err != nil {
		return nil, nil, nil, err
	} else if out != "" {
		return nil, nil, nil, fmt.Errorf("the working tree has changes; commit or stash them first:\n%s", out)
	}
	if all, err = Modules(root); err != nil {
		return nil, nil, nil, err
	}
	cl, err := readChangelog(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		return nil, nil, nil, err
	}
	if cut, err = cl.Cut(version, now.UTC().Format(time.DateOnly)); err != nil {
		return nil, nil, nil, err
	}
	for _, m := range all {
		if m.Published() {
			tags = append(tags, m.Tag(version))
		}
	}
	for _, t := range tags {
		if _, err := git(ctx, root, "rev-parse", "-q", "--verify", "refs/tags/"+t); err == nil {
			return nil, nil, nil, fmt.Errorf("tag %s exists already", t)
		}
	}
	return all, cut, tags, nil
}

func readChangelog(name string) (*Changelog, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	return ParseChangelog(data)
}

// SetRequirements sets, in every module of all, each requirement on a
// published module to version, and go.work's replaces of the repository's
// modules to that version (the workspace replaces one version of a module
// of its own, never all).
func SetRequirements(root string, all []Module, version string) error {
	if err := setWorkReplaces(root, all, version); err != nil {
		return err
	}
	published := map[string]bool{}
	for _, m := range all {
		if m.Published() {
			published[m.Path] = true
		}
	}
	for _, m := range all {
		f, err := readModFile(root, m.Dir)
		if err != nil {
			return err
		}
		changed := false
		for _, r := range f.Require {
			if published[r.Mod.Path] && r.Mod.Version != version {
				if err := f.AddRequire(r.Mod.Path, version); err != nil {
					return err
				}
				changed = true
			}
		}
		if !changed {
			continue
		}
		f.Cleanup()
		data, err := f.Format()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(root, filepath.FromSlash(m.Dir), "go.mod"), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func setWorkReplaces(root string, all []Module, version string) error {
	name := filepath.Join(root, "go.work")
	data, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	published := map[string]bool{}
	for _, m := range all {
		published[m.Path] = m.Published()
	}
	// Line by line, so that go.work keeps its form and comments: a
	// replace of a published module, "<path> <version> => <dir>", in a
	// block or on a replace line of its own, gets the new version.
	lines := strings.Split(string(data), "\n")
	for i, l := range lines {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(l), "replace "))
		if len(f) == 4 && f[2] == "=>" && published[f[0]] && f[1] != version {
			lines[i] = strings.Replace(l, f[0]+" "+f[1]+" ", f[0]+" "+version+" ", 1)
		}
	}
	out := []byte(strings.Join(lines, "\n"))
	if _, err := modfile.ParseWork(name, out, nil); err != nil {
		return fmt.Errorf("go.work after setting its replaces to %s: %w", version, err)
	}
	return os.WriteFile(name, out, 0o644)
}

// Check is what a release asks of the tree at root: each published module
// resolves outside it (CheckPublishable); each module's go.mod and go.sum
// are tidy on their own, outside the workspace, the repository's other
// modules standing in for the versions they require (a temporary go.mod,
// never the module's own, holds those replaces); and the workspace loads
// every package of every module (go.work's replaces match what the
// modules require).
func Check(ctx context.Context, root string) error {
	all, err := Modules(root)
	if err != nil {
		return err
	}
	var problems []string
	if len(all) > 0 {
		cmd := exec.CommandContext(ctx, "go", "list", "-deps", "-f", "{{.ImportPath}}", all[0].Path+"/...")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOWORK="+filepath.Join(root, "go.work"), "GOFLAGS=")
		if out, err := cmd.CombinedOutput(); err != nil {
			problems = append(problems, fmt.Sprintf("the workspace does not load:\n%s", lastLines(out, 20)))
		}
	}
	for _, m := range all {
		if m.Published() {
			if err := CheckPublishable(root, m, all); err != nil {
				problems = append(problems, err.Error())
			}
		}
		if err := tidyDiff(ctx, root, m, all); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "\n"))
	}
	return nil
}

// tidyDiff runs go mod tidy -diff on m outside the workspace, with the
// other modules of the repository as replaces in a copy of its go.mod.
func tidyDiff(ctx context.Context, root string, m Module, all []Module) error {
	tmp, out, err := tidyOutside(ctx, root, m, all, "-diff")
	os.RemoveAll(tmp)
	if err != nil {
		return fmt.Errorf("%s is not tidy (go mod tidy in %s, outside the workspace):\n%s", m.Path, m.Dir, bytes.TrimSpace(out))
	}
	return nil
}

// tidyOutside runs go mod tidy (with args) on m outside the workspace, on
// a copy of its go.mod and go.sum in a new directory (returned, for the
// caller to remove) that replaces the repository's other modules with
// their directories.
func tidyOutside(ctx context.Context, root string, m Module, all []Module, args ...string) (tmp string, out []byte, err error) {
	if tmp, err = os.MkdirTemp("", "release-tidy-"); err != nil {
		return "", nil, err
	}
	modFile, err := WithLocalReplaces(root, m, all, tmp)
	if err != nil {
		return tmp, nil, err
	}
	cmd := exec.CommandContext(ctx, "go", append([]string{"mod", "tidy", "-modfile=" + modFile}, args...)...)
	cmd.Dir = filepath.Join(root, filepath.FromSlash(m.Dir))
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err = cmd.CombinedOutput()
	return tmp, out, err
}

// Tidy runs go mod tidy in every module of the workspace at root, outside
// the workspace, with the others standing in by replaces in a temporary
// copy of its go.mod (WithLocalReplaces); the module gets the tidied
// go.mod without those replaces, and the tidied go.sum.
func Tidy(ctx context.Context, root string) error {
	all, err := Modules(root)
	if err != nil {
		return err
	}
	for _, m := range all {
		if err := tidy(ctx, root, m, all); err != nil {
			return fmt.Errorf("tidy %s: %w", m.Dir, err)
		}
	}
	return nil
}

func tidy(ctx context.Context, root string, m Module, all []Module) error {
	tmp, out, err := tidyOutside(ctx, root, m, all)
	defer os.RemoveAll(tmp)
	if err != nil {
		return fmt.Errorf("%w:\n%s", err, bytes.TrimSpace(out))
	}
	modFile, dir := filepath.Join(tmp, "go.mod"), filepath.Join(root, filepath.FromSlash(m.Dir))
	data, err := os.ReadFile(modFile)
	if err != nil {
		return err
	}
	f, err := modfile.Parse(modFile, data, nil)
	if err != nil {
		return err
	}
	for _, o := range all {
		if o.Path != m.Path {
			if err := f.DropReplace(o.Path, ""); err != nil {
				return err
			}
		}
	}
	f.Cleanup()
	if data, err = f.Format(); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), data, 0o644); err != nil {
		return err
	}
	sum, err := os.ReadFile(filepath.Join(tmp, "go.sum"))
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644)
}

// WithLocalReplaces writes into dir a copy of m's go.mod and go.sum that
// replaces every other module of the repository with its directory under
// root, at every version, and returns the copy's go.mod path (for -modfile).
func WithLocalReplaces(root string, m Module, all []Module, dir string) (string, error) {
	modDir := filepath.Join(root, filepath.FromSlash(m.Dir))
	f, err := readModFile(root, m.Dir)
	if err != nil {
		return "", err
	}
	for _, o := range all {
		if o.Path == m.Path {
			continue
		}
		abs, err := filepath.Abs(filepath.Join(root, filepath.FromSlash(o.Dir)))
		if err != nil {
			return "", err
		}
		if err := f.AddReplace(o.Path, "", abs, ""); err != nil {
			return "", err
		}
	}
	data, err := f.Format()
	if err != nil {
		return "", err
	}
	modFile := filepath.Join(dir, "go.mod")
	if err := os.WriteFile(modFile, data, 0o644); err != nil {
		return "", err
	}
	sum, err := os.ReadFile(filepath.Join(modDir, "go.sum"))
	if err != nil && !os.IsNotExist(err) {
		return "", err
	}
	return modFile, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644)
}

// lastLines is the end of a command's output, at most n lines.
func lastLines(out []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) > n {
		lines = append([]string{"…"}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return strings.TrimSpace(string(out)), nil
}
