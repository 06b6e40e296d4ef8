package mirror

import (
	"context"
	"fmt"
	"io/fs"
	"net/url"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/internal/mountfs"
)

// Mount puts file systems into base at directories, as a checkout puts
// submodules into the superproject's tree: a name at or under a mount
// point is read from the mounted file system, and each mount point is a
// directory of its parent. Mount points are slash-separated paths
// relative to base's root; a mount point inside another is read from the
// outer one's file system, so nested submodules mount into their parent's.
// Nothing crosses a mount point: a symlink is followed within its own file
// system only. The result implements what [Mirror.FS]'s does, as far as
// the file systems it joins do, and io.Closer (closing them all).
func Mount(base fs.FS, mounts map[string]fs.FS) fs.FS { return mountfs.Mount(base, mounts) }

// maxGitmodules caps the .gitmodules read: it comes from the repository,
// and a repository is hostile until checked.
const maxGitmodules = 1 << 20

// Submodule is a submodule of a commit: where it is, the repository its
// .gitmodules names, and the commit the superproject pins it at.
type Submodule struct {
	// Path is where it is, relative to the selection's Path.
	Path string
	// URL is the repository as .gitmodules has it: absolute, or relative
	// to the superproject's URL ("../lib.git"; see [ResolveSubmoduleURL]).
	URL string
	// Commit is the commit the superproject's tree pins (its gitlink).
	Commit gitutil.Hash
}

// Submodules returns the submodules the selection keeps in the commit:
// the gitlinks its .gitmodules declares, sorted by path. The file systems of
// [Mirror.FS] leave submodules out, so a caller that delivers a tree says
// which ones it lacks. A commit without .gitmodules has none; a
// .gitmodules that cannot be parsed is an error. Evaluating ignore
// patterns honours ctx and has a budget ([ErrSelectionBudget]).
func (m *Mirror) Submodules(ctx context.Context, h gitutil.Hash, sel Selection) ([]Submodule, error) {
	commit := plumbing.Hash(h)
	s, err := sel.compile()
	if err != nil {
		return nil, err
	}
	out, selRoot, ev, err := m.startSubmodules(ctx, commit, s, sel.plain())
	if err != nil || ev == nil {
		return out, err
	}
	defer ev.end()
	paths := make([]string, len(out))
	for i, sm := range out {
		paths[i] = sm.Path
	}
	kept, err := ev.keep(s, selRoot, paths)
	if err = m.selectionDone(ev, s, err); err != nil {
		return nil, err
	}
	return slices.DeleteFunc(out, func(sm Submodule) bool { return !slices.Contains(kept, sm.Path) }), nil
}

// startSubmodules returns, under m.mu, the submodules under the
// selection's root at commit and, when its patterns may hide some, the
// selection's root tree and an evaluation to filter them outside the lock.
func (m *Mirror) startSubmodules(ctx context.Context, commit plumbing.Hash, s *selector, plain bool) ([]Submodule, *object.Tree, *selEval, error) {
	m.mu.Lock()
	defer m.unlock()
	c, err := m.commit(commit)
	if err != nil {
		return nil, nil, nil, err
	}
	root, err := c.Tree()
	if err != nil {
		return nil, nil, nil, m.markCorrupt(err)
	}
	mods, err := m.gitmodules(commit, root)
	if err != nil || mods == nil {
		return nil, nil, nil, err
	}
	out := gitlinksUnder(root, mods, s.root)
	if plain || len(out) == 0 {
		return out, nil, nil, nil
	}
	e, err := m.entryAt(commit, s.root)
	if err != nil {
		return nil, nil, nil, err
	}
	selRoot, err := m.selectionRoot(commit, s, e)
	if err != nil || selRoot == nil {
		return out, nil, nil, err
	}
	if err := m.overBudgetBefore(s.id); err != nil {
		return nil, nil, nil, err
	}
	ev, err := m.newSelEval(ctx)
	return out, selRoot, ev, err
}

// gitmodules parses the .gitmodules of root, the tree of commit, at most
// maxGitmodules bytes; nil without one.
func (m *Mirror) gitmodules(commit plumbing.Hash, root *object.Tree) (*config.Modules, error) {
	var e *object.TreeEntry
	for i := range root.Entries {
		if root.Entries[i].Name == ".gitmodules" {
			e = &root.Entries[i]
		}
	}
	if e == nil || !e.Mode.IsFile() || e.Mode == filemode.Symlink {
		return nil, nil
	}
	data, err := m.blobUpTo(e.Hash, maxGitmodules)
	if err != nil {
		return nil, err
	}
	if len(data) > maxGitmodules {
		return nil, fmt.Errorf("mirror: .gitmodules at %s is larger than %d bytes", commit, maxGitmodules)
	}
	mods := config.NewModules()
	if err := mods.Unmarshal(data); err != nil {
		return nil, fmt.Errorf("mirror: .gitmodules at %s: %w", commit, err)
	}
	return mods, nil
}

// gitlinksUnder are the submodules mods declares that root has as gitlinks
// under p ("" for all), with paths relative to p, sorted.
func gitlinksUnder(root *object.Tree, mods *config.Modules, p string) []Submodule {
	var out []Submodule
	for _, sm := range mods.Submodules {
		sp, err := CleanPath(sm.Path)
		if err != nil || sp == "" {
			continue // a hostile or empty path names nothing in the tree
		}
		rel := sp
		if p != "" {
			var ok bool
			if rel, ok = strings.CutPrefix(sp, p+"/"); !ok {
				continue
			}
		}
		if e, err := root.FindEntry(sp); err == nil && e.Mode == filemode.Submodule {
			out = append(out, Submodule{Path: path.Clean(rel), URL: sm.URL, Commit: gitutil.Hash(e.Hash)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// ResolveSubmoduleURL returns the URL of a submodule whose .gitmodules
// says sub, in a superproject fetched from super: a URL relative to the
// superproject ("./x", "../lib.git") is resolved against its path, as git
// does; any other must be a URL [ParseURL] accepts. A relative URL never
// climbs above the superproject's host.
func ResolveSubmoduleURL(super, sub string) (string, error) {
	if !strings.HasPrefix(sub, "./") && !strings.HasPrefix(sub, "../") {
		if _, err := gitutil.ParseURL(sub); err != nil {
			return "", fmt.Errorf("submodule URL: %w", err)
		}
		return sub, nil
	}
	e, err := gitutil.ParseURL(super)
	if err != nil {
		return "", err
	}
	var out string
	if e.Scheme == "ssh" && !strings.Contains(super, "://") { // scp-like: git@host:path
		prefix, base, _ := strings.Cut(super, ":")
		out = prefix + ":" + strings.TrimPrefix(path.Clean("/"+base+"/"+sub), "/")
	} else {
		u, err := url.Parse(super)
		if err != nil {
			return "", fmt.Errorf("%w: %s", gitutil.ErrInvalidURL, gitutil.RedactURL(super))
		}
		// "/../x" cleans to "/x": never above the host.
		u.Path, u.RawPath = path.Clean("/"+u.Path+"/"+sub), ""
		u.RawQuery, u.Fragment = "", ""
		if e.Scheme != "ssh" {
			u.User = nil
		}
		out = u.String()
	}
	if _, err := gitutil.ParseURL(out); err != nil {
		return "", fmt.Errorf("submodule URL: %w", err)
	}
	return out, nil
}
