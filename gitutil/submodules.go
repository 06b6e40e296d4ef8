package gitutil

import (
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// maxGitmodules caps the .gitmodules read: it comes from the repository,
// and a repository is hostile until checked.
const maxGitmodules = 1 << 20

// Submodules returns the paths, relative to the selection's Path, of the
// submodules the selection keeps in the commit: the gitlinks its
// .gitmodules declares. The file systems of
// [Mirror.FS] leave submodules out, so a caller that delivers a tree says
// which ones it lacks. A commit without .gitmodules has none; a
// .gitmodules that cannot be parsed is an error.
func (m *Mirror) Submodules(commit plumbing.Hash, sel Selection) ([]string, error) {
	s, err := sel.compile()
	if err != nil {
		return nil, err
	}
	p := s.root
	m.mu.Lock()
	defer m.mu.Unlock()
	c, err := m.commit(commit)
	if err != nil {
		return nil, err
	}
	root, err := c.Tree()
	if err != nil {
		return nil, m.markCorrupt(err)
	}
	f, err := root.File(".gitmodules")
	if errors.Is(err, object.ErrFileNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, m.markCorrupt(err)
	}
	if f.Size > maxGitmodules {
		return nil, fmt.Errorf("gitutil: .gitmodules at %s is larger than %d bytes", commit, maxGitmodules)
	}
	r, err := f.Reader()
	if err != nil {
		return nil, m.markCorrupt(err)
	}
	data, err := io.ReadAll(io.LimitReader(r, maxGitmodules))
	r.Close()
	if err != nil {
		return nil, m.markCorrupt(err)
	}
	mods := config.NewModules()
	if err := mods.Unmarshal(data); err != nil {
		return nil, fmt.Errorf("gitutil: .gitmodules at %s: %w", commit, err)
	}
	var out []string
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
			out = append(out, path.Clean(rel))
		}
	}
	sort.Strings(out)
	if sel.plain() || len(out) == 0 {
		return out, nil
	}
	e, err := m.entryAt(commit, p)
	if err != nil {
		return nil, err
	}
	selRoot, err := m.selectionRoot(commit, s, e)
	if err != nil || selRoot == nil {
		return out, err
	}
	return m.keep(s, selRoot, out)
}
