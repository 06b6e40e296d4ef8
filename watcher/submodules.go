package watcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"sync"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/mirror"
	"github.com/modwatch/modwatch/watcher/internal/cachedir"
)

// maxSubmoduleDepth bounds how deep submodules of submodules are followed;
// maxSubmodules how many one delivery mounts in all. A repository is
// hostile until checked.
const (
	maxSubmoduleDepth = 8
	maxSubmodules     = 256
)

// submodules are the mirrors of the repositories that targets recurse
// into. They are not polled: each is fetched by the commit a superproject
// pins, once for every target that pins it, into a mirror of its own per
// repository and credential identity.
type submodules struct {
	v   *env
	dir string // the cache directory
	tmp string // its private temporary directory

	mu      sync.Mutex
	mirrors map[string]*subMirror
}

type subMirror struct {
	dir string
	// opened is closed once mirror or err is set: a mirror is opened
	// outside submodules.mu, once for the targets that need it together.
	opened chan struct{}
	mirror Mirror // guarded by submodules.mu until opened is closed
	err    error
	// fetching is held while a commit is fetched: targets pinning the same
	// one wait for that fetch rather than make their own.
	fetching sync.Mutex
}

// open returns the mirror of url for auth, opening it the first time.
// The opening is the program's code (a Git of WithGit, which may log
// through a logger that reads the watcher's Stats): it runs without s.mu.
// One that failed is tried again by the next delivery that needs it.
func (s *submodules) open(ctx context.Context, url string, auth *gitutil.Auth) (*subMirror, error) {
	ep, err := gitutil.ParseURL(url)
	if err != nil {
		return nil, err
	}
	// Another name space than the remotes': a submodule's mirror is never
	// a polled remote's.
	key := "submodule#" + ep.Key() + "#" + auth.Identity()
	s.mu.Lock()
	sm, ok := s.mirrors[key]
	if !ok {
		sm = &subMirror{dir: filepath.Join(s.dir, cachedir.MirrorName(key)), opened: make(chan struct{})}
		if s.mirrors == nil {
			s.mirrors = map[string]*subMirror{}
		}
		s.mirrors[key] = sm
	}
	s.mu.Unlock()
	if !ok {
		m, err := s.v.opts.git.OpenMirror(sm.dir, url, mirror.Options{TempDir: s.tmp, MaxKept: s.v.opts.keptTrees})
		s.mu.Lock()
		sm.mirror, sm.err = m, err
		if err != nil {
			delete(s.mirrors, key)
		}
		s.mu.Unlock()
		close(sm.opened)
	}
	select {
	case <-sm.opened:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if sm.err != nil {
		return nil, sm.err
	}
	return sm, nil
}

// kept adds what the trees of the open mirrors hold to st, asking the
// mirrors (maybe the program's) without s.mu.
func (s *submodules) kept(st *Stats) {
	if s == nil {
		return // not running
	}
	s.mu.Lock()
	mirrors := make([]Mirror, 0, len(s.mirrors))
	for _, sm := range s.mirrors {
		if sm.mirror != nil {
			mirrors = append(mirrors, sm.mirror)
		}
	}
	s.mu.Unlock()
	for _, m := range mirrors {
		st.addKept(m)
	}
}

// dirs are the directories of the open mirrors, and of those opening,
// which the cache's collector keeps.
func (s *submodules) dirs() []string {
	if s == nil {
		return nil // not running
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.mirrors))
	for _, sm := range s.mirrors {
		out = append(out, filepath.Base(sm.dir))
	}
	return out
}

// fetch makes sure the mirror of url has commit: asked for by its SHA,
// or, from a server that refuses that, with its branches and tags.
func (s *submodules) fetch(ctx context.Context, url string, auth *gitutil.Auth, commit gitutil.Hash) (Mirror, error) {
	sm, err := s.open(ctx, url, auth)
	if err != nil {
		return nil, err
	}
	cachedir.Touch(sm.dir)
	m := sm.mirror
	pf, partial := m.(PathFetcher)
	partial = partial && pf.Partial() // then its files may be missing too
	if m.HasCommit(commit) && !partial {
		return m, nil
	}
	sm.fetching.Lock()
	defer sm.fetching.Unlock()
	if m.HasCommit(commit) && !partial {
		return m, nil // fetched while this one waited
	}
	if err := s.v.fetches.Acquire(ctx); err != nil {
		return nil, err
	}
	defer s.v.fetches.Release()
	host := hostOf(url)
	if err := s.v.hosts.Acquire(ctx, host); err != nil {
		return nil, fmt.Errorf("watcher: submodule %s at %s: %w", gitutil.RedactURL(url), commit, err)
	}
	defer s.v.hosts.Release(host, false)
	ctx, cancel := context.WithTimeout(ctx, s.v.opts.fetchTimeout)
	defer cancel()
	if !m.HasCommit(commit) {
		if err := s.fetchCommit(ctx, m, url, host, auth, commit); err != nil {
			return nil, err
		}
	}
	// Its files too, in a mirror that may lack them (after the fetch,
	// which may have made it partial): a submodule is delivered whole.
	if pf, ok := m.(PathFetcher); ok && pf.Partial() {
		if err := pf.FetchPaths(ctx, auth, commit, []string{""}); err != nil {
			return nil, fmt.Errorf("watcher: submodule %s at %s: %w", gitutil.RedactURL(url), commit, err)
		}
	}
	return m, nil
}

// fetchCommit brings commit into m, the mirror of the submodule at url,
// in the turn at host its caller holds: by its name, else with the refs
// the remote lists. A rate limit stops it, the host asked nothing more.
func (s *submodules) fetchCommit(ctx context.Context, m Mirror, url, host string, auth *gitutil.Auth, commit gitutil.Hash) error {
	redacted := gitutil.RedactURL(url)
	res, err := m.FetchCommit(ctx, auth, commit)
	s.v.hosts.Charge(host, res.Requests-1)
	if err == nil || m.HasCommit(commit) {
		return nil
	}
	if s.v.rateLimited(host, redacted, err); errors.Is(err, gitutil.ErrRateLimited) {
		return fmt.Errorf("watcher: submodule %s at %s: %w", redacted, commit, err)
	}
	refs, lerr := s.v.opts.git.ListRefs(ctx, url, auth, []string{"refs/heads/", "refs/tags/"})
	if lerr == nil && len(refs.Refs) > 0 {
		res, lerr = m.FetchListed(ctx, auth, refs.Refs)
		s.v.hosts.Charge(host, 1+res.Requests) // the listing's too
	}
	s.v.rateLimited(host, redacted, lerr)
	if m.HasCommit(commit) {
		return nil
	}
	return fmt.Errorf("watcher: submodule %s at %s: %w", redacted, commit, errors.Join(err, lerr))
}

// auth is what a submodule of t at url is fetched with: what a target
// naming url would get, never more. The target's own credentials go to its
// own host only (a .gitmodules names any URL it likes); without them,
// the watcher's resolver answers for url, as it would for a target.
func (v *env) submoduleAuth(ctx context.Context, t Target, url string) (*gitutil.Auth, error) {
	if t.Auth != nil {
		super, _ := gitutil.ParseURL(t.URL)
		sub, err := gitutil.ParseURL(url)
		if err != nil {
			return nil, err
		}
		if sub.Scheme == super.Scheme && sub.Host == super.Host {
			return t.Auth, nil
		}
		return nil, nil
	}
	if v.opts.creds == nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, v.opts.listTimeout)
	defer cancel()
	return v.opts.creds.Resolve(ctx, url)
}

// mountSubmodules puts into fsys (what sel keeps of commit in m, a mirror
// of url) the trees of its submodules at the commits it pins, and theirs
// in turn. The file systems it opened are closed on error.
func (v *env) mountSubmodules(ctx context.Context, t Target, m MirrorReader, url string, commit gitutil.Hash, sel mirror.Selection, fsys fs.FS, depth int, count *int) (_ fs.FS, err error) {
	subs, err := m.Submodules(ctx, commit, sel)
	if err != nil || len(subs) == 0 {
		return fsys, err
	}
	if depth >= maxSubmoduleDepth {
		return nil, fmt.Errorf("watcher: submodules nested deeper than %d", maxSubmoduleDepth)
	}
	mounts := map[string]fs.FS{}
	defer func() {
		if err != nil {
			for _, f := range mounts {
				if c, ok := f.(io.Closer); ok {
					_ = c.Close()
				}
			}
		}
	}()
	for _, sm := range subs {
		if *count++; *count > maxSubmodules {
			return nil, fmt.Errorf("watcher: more than %d submodules", maxSubmodules)
		}
		subURL, err := mirror.ResolveSubmoduleURL(url, sm.URL)
		if err != nil {
			return nil, fmt.Errorf("watcher: submodule %s: %w", sm.Path, err)
		}
		if ep, _ := gitutil.ParseURL(subURL); ep.Scheme == "file" && !v.opts.localRepos {
			return nil, fmt.Errorf("watcher: submodule %s: local repositories are refused (see WithLocalRepositories)", sm.Path)
		}
		auth, err := v.submoduleAuth(ctx, t, subURL)
		if err != nil {
			return nil, fmt.Errorf("watcher: submodule %s: credentials for %s: %w", sm.Path, gitutil.RedactURL(subURL), err)
		}
		sub, err := v.subs.fetch(ctx, subURL, auth, sm.Commit)
		if err != nil {
			return nil, err
		}
		subFS, err := sub.FS(sm.Commit, mirror.Selection{})
		if err != nil {
			return nil, err
		}
		mounts[sm.Path] = subFS
		if mounts[sm.Path], err = v.mountSubmodules(ctx, t, sub, subURL, sm.Commit, mirror.Selection{}, subFS, depth+1, count); err != nil {
			mounts[sm.Path] = subFS // closed by the deferred loop
			return nil, err
		}
	}
	return mirror.Mount(fsys, mounts), nil
}
