package watchertest

import (
	"context"
	"crypto/sha1"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"

	"github.com/go-git/go-git/v5/plumbing/format/gitignore"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/mirror"
	"github.com/modwatch/modwatch/watcher"
)

// Git is a [watcher.Git] held in memory, for the tests of a scheduler or
// of a wiring that need no git server: remotes made with [Git.Remote] and
// committed to as a [Repo] is, and mirrors that copy their commits. It
// touches no network and writes no object to disk (a mirror's directory is
// made, empty, because the watcher owns and collects it). It is safe for
// concurrent use.
//
//	git := watchertest.NewGit()
//	remote := git.Remote("https://git.example/team/app.git")
//	commit := remote.Commit(t, map[string]string{"deploy/app.yaml": "kind: ConfigMap"})
//	w := watchertest.NewWatcher(t, watcher.WithGit(git))
//
// It holds commits and branches, lightweight tags and a HEAD; it has no
// signatures (VerifyCommit and VerifyTag return mirror.ErrUnverified),
// no submodules, and does not check credentials.
type Git struct {
	mu      sync.Mutex
	remotes map[string]*Remote
	mirrors map[string]*memMirror // by directory
}

// NewGit returns a Git with no remotes.
func NewGit() *Git {
	return &Git{remotes: map[string]*Remote{}, mirrors: map[string]*memMirror{}}
}

var _ watcher.Git = (*Git)(nil)

// Remote returns the remote at url, empty when first asked for (the
// watcher normalizes a target's URL before it lists it: give the URL as
// gitutil.NormalizeURL returns it).
func (g *Git) Remote(url string) *Remote {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.remotes[url]
	if !ok {
		r = &Remote{url: url, refs: map[string]gitutil.Hash{}, commits: map[gitutil.Hash]*memCommit{}}
		g.remotes[url] = r
	}
	return r
}

func (g *Git) remote(url string) (*Remote, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.remotes[url]
	if !ok {
		return nil, &gitutil.RemoteError{Op: "list", URL: url, Err: errNoRemote}
	}
	return r, nil
}

// ListRefs implements watcher.Git: the remote's refs under prefixes.
func (g *Git) ListRefs(ctx context.Context, url string, _ *gitutil.Auth, prefixes []string) (gitutil.RefList, error) {
	if err := ctx.Err(); err != nil {
		return gitutil.RefList{}, err
	}
	r, err := g.remote(url)
	if err != nil {
		return gitutil.RefList{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lists++
	if r.err != nil {
		return gitutil.RefList{}, r.err
	}
	out := gitutil.RefList{Refs: map[string]gitutil.Hash{}, Peeled: map[string]gitutil.Hash{}}
	for name, h := range r.refs {
		if len(prefixes) == 0 || slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
			out.Refs[name] = h
		}
	}
	// HEAD is main, and the ref it points at is listed when HEAD is asked
	// for, as a server's ls-refs does.
	if h, ok := r.refs["refs/heads/main"]; ok {
		out.Head = "refs/heads/main"
		if len(prefixes) == 0 || slices.Contains(prefixes, "HEAD") {
			out.Refs[out.Head] = h
		}
	}
	return out, nil
}

// OpenMirror implements watcher.Git. A mirror lives as long as its
// directory: one removed (the watcher collects a mirror no target uses)
// opens empty again.
func (g *Git) OpenMirror(dir, url string, _ mirror.Options) (watcher.Mirror, error) {
	r, err := g.remote(url)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if m, ok := g.mirrors[dir]; ok && m.remote == r {
		if _, err := os.Stat(dir); err == nil {
			return m, nil
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	m := &memMirror{remote: r, commits: map[gitutil.Hash]*memCommit{}}
	g.mirrors[dir] = m
	return m, nil
}

// Remote is a repository of a [Git].
type Remote struct {
	url string

	mu      sync.Mutex
	refs    map[string]gitutil.Hash
	commits map[gitutil.Hash]*memCommit
	n       int
	err     error
	lists   int
	fetches int
}

type memCommit struct {
	files   map[string]string
	parents []gitutil.Hash
}

// URL is the remote's address.
func (r *Remote) URL() string { return r.url }

// Commit writes files (path: content; an empty content removes the path)
// over the tree of main's last commit, commits them to main and returns
// the commit's name, as [Repo.Commit] does.
func (r *Remote) Commit(t testing.TB, files map[string]string) gitutil.Hash {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	tree := map[string]string{}
	var parents []gitutil.Hash
	if tip, ok := r.refs["refs/heads/main"]; ok {
		maps.Copy(tree, r.commits[tip].files)
		parents = []gitutil.Hash{tip}
	}
	for name, content := range files {
		name = path.Clean(strings.TrimPrefix(name, "/"))
		if !fs.ValidPath(name) || name == "." {
			t.Fatalf("watchertest: invalid path %q", name)
		}
		if content == "" {
			delete(tree, name)
		} else {
			tree[name] = content
		}
	}
	r.n++
	h := commitName(r.n, parents, tree)
	r.commits[h] = &memCommit{files: tree, parents: parents}
	r.refs["refs/heads/main"] = h
	return h
}

// commitName names a commit by what it holds and its place in the
// remote's history.
func commitName(n int, parents []gitutil.Hash, tree map[string]string) gitutil.Hash {
	h := sha1.New()
	fmt.Fprintf(h, "commit %d\n", n)
	for _, p := range parents {
		fmt.Fprintf(h, "parent %s\n", p)
	}
	for _, name := range slices.Sorted(maps.Keys(tree)) {
		fmt.Fprintf(h, "%q %q\n", name, tree[name])
	}
	var out gitutil.Hash
	copy(out[:], h.Sum(nil))
	return out
}

// SetRef points ref (a full name: "refs/heads/main", "refs/tags/v1") at a
// commit of the remote, as a push does (a force-push when it is not a
// descendant); a zero commit deletes the ref.
func (r *Remote) SetRef(t testing.TB, ref string, commit gitutil.Hash) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if commit.IsZero() {
		delete(r.refs, ref)
		return
	}
	if _, ok := r.commits[commit]; !ok {
		t.Fatalf("watchertest: %s has no commit %s", r.url, commit)
	}
	r.refs[ref] = commit
}

// Fail makes every listing of and fetch from the remote fail with err
// until Fail(nil).
func (r *Remote) Fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.err = err
}

// Lists and Fetches count the listings of and fetches from the remote
// (failed ones included).
func (r *Remote) Lists() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lists
}

// Fetches: see [Remote.Lists].
func (r *Remote) Fetches() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fetches
}

// memMirror is a watcher.Mirror of a Remote: the commits fetched so far.
type memMirror struct {
	remote   *Remote
	mu       sync.Mutex
	commits  map[gitutil.Hash]*memCommit
	progress atomic.Int64
}

func (m *memMirror) FetchListed(ctx context.Context, _ *gitutil.Auth, listed map[string]gitutil.Hash) (mirror.FetchResult, error) {
	res := mirror.FetchResult{Refs: map[string]gitutil.Hash{}}
	for name, h := range listed {
		fetched, err := m.fetch(ctx, h)
		if err != nil {
			return mirror.FetchResult{}, fmt.Errorf("fetch %s: %w", name, err)
		}
		res.Fetched = res.Fetched || fetched
		res.Refs[name] = h
	}
	return res, nil
}

func (m *memMirror) FetchCommit(ctx context.Context, _ *gitutil.Auth, commit gitutil.Hash) (mirror.FetchResult, error) {
	fetched, err := m.fetch(ctx, commit)
	if err != nil {
		return mirror.FetchResult{}, err
	}
	return mirror.FetchResult{Fetched: fetched, Refs: map[string]gitutil.Hash{"refs/modwatch/commits/" + commit.String(): commit}}, nil
}

// fetch copies commit and its history from the remote.
func (m *memMirror) fetch(ctx context.Context, commit gitutil.Hash) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	r := m.remote
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fetches++
	if r.err != nil {
		return false, r.err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	fetched := false
	for todo := []gitutil.Hash{commit}; len(todo) > 0; {
		h := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if _, ok := m.commits[h]; ok {
			continue
		}
		c, ok := r.commits[h]
		if !ok {
			return false, &gitutil.RemoteError{Op: "fetch", URL: r.url, Err: fmt.Errorf("%w: the remote has no %s", mirror.ErrCommitNotFound, h)}
		}
		m.commits[h] = c
		m.progress.Add(1)
		fetched = true
		todo = append(todo, c.parents...)
	}
	return fetched, nil
}

func (m *memMirror) Progress() int64 { return m.progress.Load() }

func (m *memMirror) commit(h gitutil.Hash) (*memCommit, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.commits[h]
	if !ok {
		return nil, fmt.Errorf("%w: %s", mirror.ErrCommitNotFound, h)
	}
	return c, nil
}

func (m *memMirror) HasCommit(h gitutil.Hash) bool {
	_, err := m.commit(h)
	return err == nil
}

func (m *memMirror) selected(ctx context.Context, h gitutil.Hash, sel mirror.Selection) (map[string]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := m.commit(h)
	if err != nil {
		return nil, err
	}
	return selectFiles(c.files, sel)
}

func (m *memMirror) TreeHash(ctx context.Context, commit gitutil.Hash, sel mirror.Selection) (gitutil.Hash, error) {
	files, err := m.selected(ctx, commit, sel)
	if err != nil {
		return gitutil.ZeroHash, err
	}
	return commitName(0, nil, files), nil
}

func (m *memMirror) IsAncestor(ctx context.Context, ancestor, commit gitutil.Hash) (bool, error) {
	for todo := []gitutil.Hash{commit}; len(todo) > 0; {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		h := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if h == ancestor {
			return true, nil
		}
		c, err := m.commit(h)
		if err != nil {
			return false, err
		}
		todo = append(todo, c.parents...)
	}
	return false, nil
}

func (m *memMirror) ChangedPaths(ctx context.Context, from, to gitutil.Hash, sel mirror.Selection) ([]string, error) {
	before, err := m.selected(ctx, from, sel)
	if err != nil {
		return nil, err
	}
	after, err := m.selected(ctx, to, sel)
	if err != nil {
		return nil, err
	}
	paths := []string{} // known, if empty: nil would say unknown
	for name, content := range after {
		if was, ok := before[name]; !ok || was != content {
			paths = append(paths, name)
		}
	}
	for name := range before {
		if _, ok := after[name]; !ok {
			paths = append(paths, name)
		}
	}
	slices.Sort(paths)
	return paths, nil
}

func (m *memMirror) FS(commit gitutil.Hash, sel mirror.Selection) (fs.FS, error) {
	files, err := m.selected(context.Background(), commit, sel)
	if err != nil {
		return nil, err
	}
	out := fstest.MapFS{}
	for name, content := range files {
		out[name] = &fstest.MapFile{Data: []byte(content), Mode: 0o644}
	}
	return out, nil
}

func (m *memMirror) Submodules(ctx context.Context, commit gitutil.Hash, sel mirror.Selection) ([]mirror.Submodule, error) {
	_, err := m.selected(ctx, commit, sel)
	return nil, err
}

func (m *memMirror) VerifyCommit(commit gitutil.Hash, _ string) (string, error) {
	if _, err := m.commit(commit); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%w: %s: watchertest.Git commits are unsigned", mirror.ErrUnverified, commit)
}

func (m *memMirror) VerifyTag(ref string, commit gitutil.Hash, _ string) (string, error) {
	if _, err := m.commit(commit); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%w: %s: watchertest.Git tags are lightweight", mirror.ErrUnverified, ref)
}

// selectFiles is what sel keeps of a commit's files, by path relative to
// sel.Path, as mirror.Mirror selects from a tree.
func selectFiles(files map[string]string, sel mirror.Selection) (map[string]string, error) {
	if err := sel.Validate(); err != nil {
		return nil, err
	}
	root := strings.Trim(path.Clean("/"+sel.Path), "/")
	out := map[string]string{}
	for name, content := range files {
		if rel, ok := under(name, root); ok {
			out[rel] = content
		}
	}
	if root != "" && len(out) == 0 {
		return nil, fmt.Errorf("%w: %q", mirror.ErrPathNotFound, sel.Path)
	}
	if len(sel.Paths) > 0 {
		if err := narrow(out, sel.Paths); err != nil {
			return nil, err
		}
	}
	if len(sel.Ignore) > 0 || sel.IgnoreFile != "" {
		ignore(out, sel)
	}
	return out, nil
}

// under is name relative to root, when it is root or below it.
func under(name, root string) (string, bool) {
	if root == "" {
		return name, true
	}
	rel, ok := strings.CutPrefix(name, root+"/")
	return rel, ok
}

// narrow keeps the files under one of paths; each must hold one.
func narrow(files map[string]string, paths []string) error {
	found := make([]bool, len(paths))
	for name := range files {
		keep := false
		for i, p := range paths {
			if _, ok := under(name, strings.Trim(path.Clean("/"+p), "/")); ok || name == p {
				found[i], keep = true, true
			}
		}
		if !keep {
			delete(files, name)
		}
	}
	if i := slices.Index(found, false); i >= 0 {
		return fmt.Errorf("%w: %q", mirror.ErrPathNotFound, paths[i])
	}
	return nil
}

// ignore drops what sel's patterns and ignore files hide, in .gitignore
// syntax: Ignore as a file at the root, then each ignore file's patterns
// for its directory.
func ignore(files map[string]string, sel mirror.Selection) {
	var patterns []gitignore.Pattern
	add := func(text string, domain []string) {
		for _, line := range strings.Split(text, "\n") {
			if line = strings.TrimRight(line, "\r"); strings.TrimSpace(line) != "" && !strings.HasPrefix(line, "#") {
				patterns = append(patterns, gitignore.ParsePattern(line, domain))
			}
		}
	}
	add(strings.Join(sel.Ignore, "\n"), nil)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if sel.IgnoreFile != "" && path.Base(name) == sel.IgnoreFile {
			dir := strings.Split(path.Dir(name), "/")
			if path.Dir(name) == "." {
				dir = nil
			}
			add(files[name], dir)
		}
	}
	m := gitignore.NewMatcher(patterns)
	for name := range files {
		parts := strings.Split(name, "/")
		hidden := m.Match(parts, false)
		for i := 1; i < len(parts) && !hidden; i++ {
			hidden = m.Match(parts[:i], true)
		}
		if hidden {
			delete(files, name)
		}
	}
}

// errNoRemote is what a Git says of a URL it has no remote for.
var errNoRemote = errors.New("watchertest: no remote at this URL")
