package mirror

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/modwatch/modwatch/gitutil"
)

// ErrInvalidPath is returned (wrapped) for a target path that is absolute
// in a way git cannot express, or that climbs out with "..".
var ErrInvalidPath = errors.New("mirror: invalid path")

// ErrPathNotFound is returned (wrapped) when a path does not exist at a
// commit.
var ErrPathNotFound = errors.New("mirror: path not found")

// CleanPath validates and normalises a path inside a repository: "", "."
// and "/" mean the root and become ""; "./a//b/" becomes "a/b". A ".."
// element, a backslash or a NUL byte is an error, so a target can never name
// something outside the repository.
func CleanPath(p string) (string, error) {
	if strings.ContainsAny(p, "\x00\\") {
		return "", fmt.Errorf("%w: %q contains a NUL byte or a backslash", ErrInvalidPath, p)
	}
	for _, elem := range strings.Split(p, "/") {
		if elem == ".." {
			return "", fmt.Errorf("%w: %q contains \"..\"", ErrInvalidPath, p)
		}
	}
	c := strings.Trim(path.Clean("/"+p), "/")
	return c, nil
}

// entryAt returns the entry at p in the commit's tree (a directory entry
// for the root), decoding the trees above it but not the one it names;
// callers hold m.mu. A missing path is ErrPathNotFound.
func (m *Mirror) entryAt(commit plumbing.Hash, p string) (*object.TreeEntry, error) {
	p, err := CleanPath(p)
	if err != nil {
		return nil, err
	}
	c, err := m.commit(commit)
	if err != nil {
		return nil, err
	}
	if p == "" {
		return &object.TreeEntry{Mode: filemode.Dir, Hash: c.TreeHash}, nil
	}
	t, err := m.tree(c.TreeHash)
	if err != nil {
		return nil, err
	}
	// Walked here, not with go-git's FindEntry, which reads a file where
	// the path wants a directory as a missing tree: in an old commit, "a"
	// a link and the path "a/b" is not there, not a corrupt store.
	parts := strings.Split(p, "/")
	for i, name := range parts {
		var e *object.TreeEntry
		for j := range t.Entries {
			if t.Entries[j].Name == name {
				e = &t.Entries[j]
				break
			}
		}
		switch {
		case e == nil || (i < len(parts)-1 && e.Mode != filemode.Dir):
			return nil, fmt.Errorf("%w: %q at %s", ErrPathNotFound, p, commit)
		case i == len(parts)-1:
			return e, nil
		}
		if t, err = m.tree(e.Hash); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("%w: %q at %s", ErrPathNotFound, p, commit)
}

// treeSlots is how many decoded trees a mirror keeps for path diffs: a
// few, so that memory stays flat however many targets a remote has.
const treeSlots = 4

// treeOf decodes the tree an entry names; nil for an entry that is not a
// directory. The last few are kept: one delivery's new tree is the next
// one's old tree, and a large directory costs milliseconds to decode.
// Callers hold m.mu.
func (m *Mirror) treeOf(e *object.TreeEntry) (*object.Tree, error) {
	if e == nil || e.Mode != filemode.Dir {
		return nil, nil
	}
	if t := m.keptTree(e.Hash); t != nil {
		return t, nil
	}
	t, err := m.repo.TreeObject(e.Hash)
	if err != nil {
		return nil, m.markCorrupt(err)
	}
	copy(m.trees[1:], m.trees[:treeSlots-1])
	m.trees[0] = t
	return t, nil
}

// keptTree returns tree h if it is one of the last few decoded for path
// diffs, or nil. Callers hold m.mu, and only read its entries.
func (m *Mirror) keptTree(h plumbing.Hash) *object.Tree {
	for _, t := range m.trees {
		if t != nil && t.Hash == h {
			return t
		}
	}
	return nil
}

// TreeHash returns the hash of what the selection keeps at commit: for a
// plain path, the hash of the tree (or blob) there. Two commits with the
// same TreeHash for a selection deliver identical content, which is how
// the watcher skips commits that do not touch a target. With paths or
// ignore patterns it is a digest of what is kept (the tree's own hash when
// nothing is left out), and directories seen before are not read again.
//
// Evaluating ignore patterns honours ctx and has a budget
// ([ErrSelectionBudget]).
func (m *Mirror) TreeHash(ctx context.Context, c gitutil.Hash, sel Selection) (gitutil.Hash, error) {
	h, err := m.treeHash(ctx, plumbing.Hash(c), sel)
	return gitutil.Hash(h), err
}

func (m *Mirror) treeHash(ctx context.Context, commit plumbing.Hash, sel Selection) (plumbing.Hash, error) {
	if sel.plain() { // the poll's common case: one path, nothing to compile
		m.mu.Lock()
		defer m.unlock()
		e, err := m.entryAt(commit, sel.Path)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		return e.Hash, nil
	}
	s, err := sel.compile()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	ev, h, root, err := m.startSelection(ctx, commit, s)
	if err != nil || ev == nil {
		return h, err
	}
	defer ev.end()
	h, err = ev.selectedHash(s, h, root, nil, s.base())
	return h, m.selectionDone(ev, s, err)
}

// selectionRoot decodes the tree at the selection's root and checks that
// each of its paths exists; nil for a file, which has nothing to select.
// Callers hold m.mu.
func (m *Mirror) selectionRoot(commit plumbing.Hash, s *selector, e *object.TreeEntry) (*object.Tree, error) {
	root, err := m.treeOf(e)
	if err != nil {
		return nil, err
	}
	if root == nil {
		if s.paths != nil {
			return nil, fmt.Errorf("%w: %q at %s is a file, with no paths under it", ErrPathNotFound, s.root, commit)
		}
		return nil, nil
	}
	for _, p := range s.paths {
		if _, err := root.FindEntry(strings.Join(p, "/")); err != nil {
			if errors.Is(err, object.ErrDirectoryNotFound) || errors.Is(err, object.ErrEntryNotFound) {
				return nil, fmt.Errorf("%w: %q at %s", ErrPathNotFound, path.Join(s.root, strings.Join(p, "/")), commit)
			}
			return nil, m.markCorrupt(err)
		}
	}
	return root, nil
}

// ChangedPaths lists, sorted, the files added, modified or deleted in the
// selection between commits from and to, relative to its Path. It diffs
// trees (skipping identical subtrees by hash) and reads no blob but the
// ignore files. A Path missing at from counts as empty; missing at to is
// ErrPathNotFound. When an ignore file changed, what it hides or shows
// changed without a file of its own changing: the list is nil, unknown.
func (m *Mirror) ChangedPaths(ctx context.Context, fromH, toH gitutil.Hash, sel Selection) ([]string, error) {
	from, to := plumbing.Hash(fromH), plumbing.Hash(toH)
	s, err := sel.compile()
	if err != nil {
		return nil, err
	}
	ev, paths, toTree, err := m.startChangedPaths(ctx, from, to, s, sel.plain())
	if err != nil || ev == nil {
		return paths, err
	}
	defer ev.end()
	paths, err = ev.keep(s, toTree, paths)
	return paths, m.selectionDone(ev, s, err)
}

// startChangedPaths lists, under m.mu, the files changed between from and
// to under the selection's root, and returns an evaluation to filter
// them by its patterns outside the lock; none when there is nothing to
// filter.
func (m *Mirror) startChangedPaths(ctx context.Context, from, to plumbing.Hash, s *selector, plain bool) (*selEval, []string, *object.Tree, error) {
	m.mu.Lock()
	defer m.unlock()
	paths, toTree, err := m.changedPaths(ctx, from, to, s.root)
	if err != nil || plain || toTree == nil || len(paths) == 0 {
		return nil, paths, nil, err
	}
	if err := m.overBudgetBefore(s.id); err != nil {
		return nil, nil, nil, err
	}
	ev, err := m.newSelEval(ctx)
	return ev, paths, toTree, err
}

// keep filters paths (files relative to the selection's root, whose tree
// is root) to those the selection keeps; nil when one is an ignore file.
//
// root is decoded again, on the evaluation's view: the mirror's own
// decoded trees are looked up (FindEntry) under its lock.
func (e *selEval) keep(s *selector, root *object.Tree, paths []string) ([]string, error) {
	root, err := e.tree(root.Hash)
	if err != nil {
		return nil, err
	}
	cache := map[string]rules{}
	rulesAt := func(dir []string) (rules, error) {
		return s.rulesAt(root, dir, cache, e.tree, e.blob)
	}
	out := paths[:0:0]
	for _, p := range paths {
		if s.file != "" && path.Base(p) == s.file {
			return nil, nil
		}
		hidden, err := s.hiddenPath(e.b, strings.Split(p, "/"), false, rulesAt)
		if err != nil {
			return nil, err
		}
		if !hidden {
			out = append(out, p)
		}
	}
	return out, nil
}

// tree decodes a tree of the mirror; callers hold m.mu.
func (m *Mirror) tree(h plumbing.Hash) (*object.Tree, error) {
	t, err := m.repo.TreeObject(h)
	if err != nil {
		return nil, m.markCorrupt(err)
	}
	return t, nil
}

// changedPaths is ChangedPaths of a plain path, and the tree at to (nil
// for a file); callers hold m.mu.
func (m *Mirror) changedPaths(ctx context.Context, from, to plumbing.Hash, prefix string) ([]string, *object.Tree, error) {
	toEntry, err := m.entryAt(to, prefix)
	if err != nil {
		return nil, nil, err
	}
	fromEntry, err := m.entryAt(from, prefix)
	if err != nil && !errors.Is(err, ErrPathNotFound) {
		return nil, nil, err
	}
	if fromEntry != nil && fromEntry.Hash == toEntry.Hash && fromEntry.Mode == toEntry.Mode {
		return []string{}, nil, nil // the same tree: nothing to decode
	}
	toTree, err := m.treeOf(toEntry)
	if err != nil {
		return nil, nil, err
	}
	fromTree, err := m.treeOf(fromEntry)
	if err != nil {
		return nil, nil, err
	}
	if toTree == nil {
		// A file target: one path.
		if fromEntry != nil && fromEntry.Hash == toEntry.Hash {
			return nil, nil, nil
		}
		return []string{path.Base(prefix)}, nil, nil
	}
	if fromTree == nil {
		fromTree = &object.Tree{} // missing, or a file then: every file is new
	}
	var out []string
	if err := m.diffTrees(ctx, fromTree, toTree, "", &out); err != nil {
		return nil, nil, err
	}
	if out == nil {
		out = []string{}
	}
	sort.Strings(out)
	return out, toTree, nil
}

// diffTrees appends to out the files (prefixed with prefix) that differ
// between trees from and to: present on one side only, or with another
// object or mode. Identical subtrees are skipped by hash; a subtree on one
// side only is listed whole. It decodes each entry once, where go-git's
// tree diff builds and hashes a node per entry. Callers hold m.mu.
func (m *Mirror) diffTrees(ctx context.Context, from, to *object.Tree, prefix string, out *[]string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	old := make(map[string]*object.TreeEntry, len(from.Entries))
	for i := range from.Entries {
		old[from.Entries[i].Name] = &from.Entries[i]
	}
	for i := range to.Entries {
		e := &to.Entries[i]
		o := old[e.Name]
		delete(old, e.Name)
		if o != nil && o.Hash == e.Hash && o.Mode == e.Mode {
			continue
		}
		if err := m.diffEntries(ctx, o, e, prefix+e.Name, out); err != nil {
			return err
		}
	}
	for i := range from.Entries { // in tree order, what to lacks
		if o := &from.Entries[i]; old[o.Name] != nil {
			if err := m.diffEntries(ctx, o, nil, prefix+o.Name, out); err != nil {
				return err
			}
		}
	}
	return nil
}

// diffEntries appends the files that differ between entries a and b (nil
// when absent) at path p; callers hold m.mu.
func (m *Mirror) diffEntries(ctx context.Context, a, b *object.TreeEntry, p string, out *[]string) error {
	aDir, bDir := a != nil && a.Mode == filemode.Dir, b != nil && b.Mode == filemode.Dir
	if (a != nil && !aDir) || (b != nil && !bDir) {
		*out = append(*out, p) // a file (or link, or submodule) changed, came or went
	}
	if !aDir && !bDir {
		return nil
	}
	from, to := &object.Tree{}, &object.Tree{}
	var err error
	if aDir {
		if from, err = m.tree(a.Hash); err != nil {
			return err
		}
	}
	if bDir {
		if to, err = m.tree(b.Hash); err != nil {
			return err
		}
	}
	return m.diffTrees(ctx, from, to, p+"/", out)
}

// ErrHistoryIncomplete is returned by [Mirror.IsAncestor] when the walk
// reached the boundary of a shallow fetch without finding the ancestor, so
// the answer is unknown.
var ErrHistoryIncomplete = errors.New("mirror: history incomplete (shallow mirror)")

// IsAncestor reports whether ancestor is reachable from commit by following
// parents (a commit is its own ancestor). When the walk reaches the
// boundary of a shallow fetch without finding ancestor, it returns false
// and [ErrHistoryIncomplete]: the caller cannot tell a force-push from a
// commit it has no history for.
func (m *Mirror) IsAncestor(ctx context.Context, ancestorH, commitH gitutil.Hash) (bool, error) {
	ancestor, commit := plumbing.Hash(ancestorH), plumbing.Hash(commitH)
	m.mu.Lock()
	defer m.unlock()
	if ancestor == commit {
		return true, nil
	}
	if _, err := m.commit(commit); err != nil {
		return false, err
	}
	seen := map[plumbing.Hash]struct{}{commit: {}}
	queue := []plumbing.Hash{commit}
	incomplete := false
	for len(queue) > 0 {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		h := queue[0]
		queue = queue[1:]
		c, err := m.repo.CommitObject(h)
		if errors.Is(err, plumbing.ErrObjectNotFound) {
			incomplete = true // shallow boundary
			continue
		}
		if err != nil {
			return false, m.markCorrupt(err)
		}
		for _, p := range c.ParentHashes {
			if p == ancestor {
				return true, nil
			}
			if _, ok := seen[p]; !ok {
				seen[p] = struct{}{}
				queue = append(queue, p)
			}
		}
	}
	if incomplete {
		return false, ErrHistoryIncomplete
	}
	return false, nil
}
