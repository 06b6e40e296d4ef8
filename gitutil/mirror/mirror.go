package mirror

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/internal/leftovers"
	"github.com/modwatch/modwatch/gitutil/internal/packcheck"
	"github.com/modwatch/modwatch/gitutil/internal/packview"
	"github.com/modwatch/modwatch/internal/safefile"
)

// defaultFetchTimeout bounds a fetch whose ctx carries no deadline.
const defaultFetchTimeout = 10 * time.Minute

// ErrCorrupt is returned (wrapped) when the mirror's object store cannot be
// read. The next [Mirror.Fetch] rebuilds the mirror.
var ErrCorrupt = errors.New("mirror: mirror is corrupt")

// ErrRebuilt is returned (wrapped) by a file system of [Mirror.FS] that
// was made before its mirror was rebuilt: it reads nothing more. Ask the
// mirror for a new one.
var ErrRebuilt = errors.New("mirror: mirror was rebuilt since this file system was made")

// ErrCommitNotFound is returned (wrapped) when a commit is not in the mirror.
var ErrCommitNotFound = errors.New("mirror: commit not in mirror")

// ErrNotCommit is returned (wrapped) for a ref that names something other
// than a commit: a lightweight tag on a tree or a blob, an annotated tag
// of one. It is that ref's error (see [FetchResult.RefErrors]), never a
// sign that the mirror is damaged.
var ErrNotCommit = errors.New("mirror: ref does not name a commit")

// Options tune a [Mirror].
type Options struct {
	// FirstFetchDepth limits the history of the first fetch into an empty
	// mirror.
	//
	// 0 (the default) fetches full history. A shallow mirror is
	// cheaper to create but go-git v5 does not tell the server about its
	// shallow boundary on later fetches, so ancestry questions that reach
	// the boundary are unanswerable ([ErrHistoryIncomplete]) and a commit
	// that brings back an object last seen before the boundary can arrive
	// incomplete (reads then fail and the mirror is rebuilt), unless the
	// git CLI fetches (see ShallowDepth). Use it only for very large
	// repositories whose history is not rewritten.
	FirstFetchDepth int
	// GitCLI is the git binary that makes the first fetch into an empty
	// mirror.
	//
	// "" uses go-git for every fetch. The git CLI's full
	// first fetch of a large repository is several times faster and smaller
	// than go-git's; later fetches always use go-git. If the CLI fails, the
	// fetch is retried with go-git.
	GitCLI string
	// TempDir is where the git CLI's credential files (an SSH key, a CA
	// bundle) live for the length of one clone, mode 0600 in a 0700
	// directory of their own ("" is the system's). A process killed
	// mid-clone leaves them behind: give a private directory that the
	// program empties at start, as the watcher does with its cache
	// directory's ".tmp".
	TempDir string
	// OnDamage, when set, is called once when a read finds the object
	// store damaged.
	//
	// The read is the mirror's own query or one of a file system it handed
	// out; the caller can then fetch, which rebuilds the mirror, without
	// waiting for its next poll. It is called with no lock of the mirror
	// held (nor of the file system whose read found the damage): it may
	// call the mirror, and the read waits for it.
	OnDamage func(reason error)
	// OnFallback, when set, is called when go-git stood in for a git CLI
	// command that failed.
	//
	// The command is the first fetch's clone or single request, a partial
	// clone or a shallow fetch; the argument is the CLI's error, which
	// carries no secret: a program whose users give it their git says so.
	// It is called once
	// the fetch let the mirror's lock go, before it returns: it may call the
	// mirror.
	OnFallback func(cli error)
	// RepackPacks is how many packs a mirror may hold before a fetch
	// repacks it into one.
	//
	// 0 is [DefaultRepackPacks]; negative: never. Each incremental fetch
	// adds a pack.
	RepackPacks int
	// Partial makes an empty mirror partial when the remote allows it.
	//
	// The remote allows it over protocol version 2 over HTTP(S), with
	// uploadpack.allowFilter, as GitHub and GitLab do. [Mirror.FetchListed]
	// then brings commits and trees only (git's --filter=blob:none), and files come with
	// [Mirror.FetchPaths], for the paths a caller reads, or one by one
	// when a file system reads one the mirror lacks. A remote that does
	// not allow filters gets a full mirror, without an error. It needs
	// GitCLI (go-git cannot repack a mirror that lacks files) and full
	// history (FirstFetchDepth 0). A mirror stays what its first fetch made
	// it (git's remote.origin.promisor in its configuration says so).
	Partial bool
	// ShallowDepth, with a GitCLI, is the depth of the fetches into a
	// shallow or empty mirror.
	//
	// A mirror is shallow when its first fetch was, or [Mirror.Trim] made
	// it so. The CLI makes these fetches (git fetch --depth, as git-sync
	// fetches; go-git's at that depth should the CLI fail, and a full
	// first fetch): the mirror then holds
	// what a shallow clone of that depth holds, and a commit whose parent
	// lies beyond the boundary (a force-push) comes with its history that
	// deep, where go-git's plain fetch takes the server's word that the
	// mirror has what lies beyond and brings the commit without it. Give
	// a mirror that is trimmed to a depth that depth. 0: go-git fetches,
	// as without it.
	ShallowDepth int
	// Filter, with a GitCLI, makes the mirror a partial clone of git's
	// own.
	//
	// It works over any transport the CLI speaks: every fetch is the CLI's
	// git fetch --filter (ShallowDepth deep, when set), from the mirror's
	// promisor remote (its configuration's remote.origin, the mirror's
	// URL). Only "blob:none" and "blob:limit=<n>[kmg]" are taken (see
	// [ValidFilter]): the mirror holds every commit and tree, and the
	// files a server's filter let through. Its reader is git: a repository
	// that borrows its objects (alternates) and names the remote as its
	// own promisor fetches the files a checkout reads, as git-sync's
	// --filter. A server that ignores filters sends every file, as to git.
	// The mirror's file systems read what it holds; a file it lacks is
	// fetched as a Partial mirror's is (protocol version 2 over HTTP(S)),
	// or is [ErrNotFetched].
	Filter string
	// CLIFetches, with a GitCLI, makes every fetch the CLI's, and a CLI
	// that fails fails the fetch.
	//
	// Every fetch is git fetch (ShallowDepth deep into a mirror that is
	// empty or shallow), a commit's by hash ([Mirror.FetchCommit])
	// included; go-git never stands in for it (OnFallback is not called). For a program whose users give it their git, which
	// must decide (a wrapper that enforces a policy, or hands credentials
	// to git), as git-sync's --git. Listing refs ([gitutil.Lister]) stays
	// go-git's.
	CLIFetches bool
	// MaxKept bounds the file systems handed on ([Detach]) that the mirror
	// keeps readable.
	//
	// They are those of [Mirror.FS] that a garbage collection found still
	// referenced; 0 is [DefaultMaxKept]; negative: no bound. Past it,
	// the oldest is released: its reads fail with [ErrReleased], and the
	// packs a repack replaced that only it read go at the next fetch. So
	// the disk a caller that keeps trees holds is bounded: at most MaxKept
	// sets of replaced packs, each at most the size of the mirror.
	MaxKept int
	// Lister is the ref lister whose connections and knowledge of the
	// server the mirror's protocol version 2 requests share.
	//
	// A first fetch is one request to a server it listed in version 2, and
	// a server's filter support is asked once per Lister. nil: the mirror
	// keeps a Lister of its own.
	Lister *gitutil.Lister
}

// Mirror is a bare repository on disk that mirrors the refs of one remote
// that the caller asks for. It is fetched into incrementally, never
// re-cloned, and rebuilds itself when it finds stale lock files at open or a
// corrupt object store. Its methods are safe for concurrent use; fetches are
// serialized.
type Mirror struct {
	dir  string
	url  string
	host string // the remote's, whose rate limits its errors name
	opts Options
	sent atomic.Int64 // requests sent to the remote (see FetchResult.Requests)

	mu     sync.Mutex
	repo   *git.Repository
	broken error // set when a read found corruption; the next Fetch rebuilds
	// notes are the calls of the program's code (OnDamage, OnFallback) due
	// from what was found under mu, made once it is let go (see unlock);
	// noted says there are some.
	notes []func()
	noted atomic.Bool
	// rebuilt is why Open rebuilt the mirror, reported by the next Fetch.
	rebuilt error

	treesRead atomic.Int64
	// progress counts the bytes of the servers' progress messages.
	progress atomic.Int64
	repacks  atomic.Int64
	replaced map[string]bool // packs a repack made redundant, kept for readers
	// readersMu guards readers, nextReader and lastPacks, apart from mu:
	// the garbage collector's cleanup of a file system takes it, and must
	// not wait on a fetch.
	readersMu sync.Mutex
	// readers holds the packs each file system handed out and not yet
	// collected reads, by its number (treeFS.reader): its cleanup deletes
	// it, so a delivery long over leaves nothing here.
	readers    map[uint64][]string
	nextReader uint64
	// handed holds each reader's file system, weakly: nil once it is
	// unreachable, before its cleanup has run (see dropReplaced).
	handed map[uint64]weak.Pointer[treeFS]
	// kept holds the readers handed on ([Detach]), with the count of
	// garbage collections then (see overKept).
	kept map[uint64]uint64
	// pinned is the size of the replaced packs on disk (see recordReplaced).
	pinned atomic.Int64
	// lastPacks is the packs the last reader reads, given to the next
	// that reads the same: one slice for most readers, not one each.
	lastPacks []string
	// trees holds the last few directory trees decoded for path diffs: a
	// delivery's "to" is the next one's "from".
	trees [treeSlots]*object.Tree
	// selMu guards selected and overBudgetSel: selections are evaluated
	// outside mu (see selEval).
	selMu sync.Mutex
	// selected memoises the selected hashes of directories (see
	// selectedHash), so that a new commit re-reads only the directories it
	// changed; content-addressed, it survives rebuilds.
	selected map[memoKey]plumbing.Hash
	// overBudgetSel remembers the selections (by id) whose evaluation was
	// over its budget.
	overBudgetSel map[string]error
	// indexes holds the pack indexes the mirror's store and its file
	// systems share (see packidx.Index).
	indexes packview.IndexCache
	// gen counts rebuilds; a file system handed out reads only while it is
	// the generation it was made in.
	gen atomic.Uint64
	// verified holds the files of the store that its verification read
	// whole and found sound, as they were then (see verifyStore).
	verified map[string]fileStamp
	// partial is set when the mirror holds only the files it was asked for
	// (see Options.Partial); lastAuth are the credentials of its last
	// fetch, in memory only, with which a read fetches a file it lacks.
	partial  bool
	lastAuth *gitutil.Auth
	// lister is opts.Lister, or the mirror's own: its version 2 requests
	// go through it, and what it knows of the server decides them.
	lister  *gitutil.Lister
	lazying bool // a read is fetching what the mirror lacks
	// complete holds trees of a partial mirror that it holds every file
	// under (content-addressed: they stay so until a rebuild).
	complete map[plumbing.Hash]bool
}

// TreesRead counts the tree objects read from the mirror since it was
// opened, by its own queries and by the file systems it handed out.
func (m *Mirror) TreesRead() int64 { return m.treesRead.Load() }

// openRepo opens the bare repository in m.dir on the mirror's store.
func (m *Mirror) openRepo() (*git.Repository, error) {
	st, err := m.newMirrorStore()
	if err != nil {
		return nil, err
	}
	return git.Open(st, nil)
}

// FetchResult says what a fetch did.
type FetchResult struct {
	// Refs maps each requested ref to the commit it points at in the mirror
	// after the fetch (annotated tags peeled).
	Refs map[string]gitutil.Hash
	// RefErrors holds the requested refs that do not lead to a commit (a
	// tag on a tree), each with its error, wrapping [ErrNotCommit]: the
	// error of the targets that read them, not of the fetch.
	RefErrors map[string]error
	// Fetched reports whether anything was transferred.
	Fetched bool
	// Rebuilt is non-nil when the mirror was rebuilt from scratch first, and
	// says why.
	Rebuilt error
	// Repacked reports that the fetch passed the pack threshold and the
	// mirror was repacked (see [Options.RepackPacks]); RepackErr says
	// why a repack failed (the fetch itself succeeded).
	Repacked  bool
	RepackErr error
	// Requests is how many requests the fetch sent the remote, as a
	// budget of requests to its host counts them: one of the mirror's own
	// (the listed objects, a partial mirror's files), two of go-git's (the
	// advertisement, then the pack), three of the git CLI's (the
	// capabilities, the listing, the pack).
	Requests int
}

// Open opens the mirror in dir for repoURL, creating it when absent.
// A directory left with stale "*.lock" files (a crash mid-write) or that is
// not a readable repository is rebuilt empty; the first [Mirror.Fetch]
// reports why in [FetchResult.Rebuilt]. repoURL carries no credentials
// (they come with each fetch as an [Auth]), so none is written to disk.
func Open(dir, repoURL string, opts Options) (*Mirror, error) {
	e, err := gitutil.ParseBareURL(repoURL)
	if err != nil {
		return nil, err
	}
	if opts.Filter != "" {
		if err := ValidFilter(opts.Filter); err != nil {
			return nil, fmt.Errorf("mirror: %w", err)
		}
		if opts.GitCLI == "" {
			return nil, errors.New("mirror: a mirror with a Filter needs the git CLI")
		}
	}
	m := &Mirror{dir: dir, url: repoURL, host: e.Host, opts: opts, lister: opts.Lister, readers: map[uint64][]string{}, replaced: map[string]bool{}}
	if m.lister == nil {
		m.lister = gitutil.NewLister()
	}
	var rebuilt error
	if locks := leftovers.StaleLocks(dir); len(locks) > 0 {
		rebuilt = fmt.Errorf("stale lock files: %s", strings.Join(locks, ", "))
	}
	if rebuilt == nil {
		leftovers.ClearAll(dir)
		dropLeftReplaced(dir)
		if perr := packcheck.Packs(dir, true); perr != nil {
			rebuilt = fmt.Errorf("damaged object store: %w", perr)
		}
	}
	if rebuilt == nil {
		repo, err := m.openRepo()
		switch {
		case err == nil:
			if cfg, cerr := repo.Config(); cerr != nil || !cfg.Core.IsBare {
				rebuilt = fmt.Errorf("not a bare repository")
			} else {
				m.repo = repo
				m.partial = m.readPartial()
			}
		case errors.Is(err, git.ErrRepositoryNotExists) && isEmptyDir(dir):
		default:
			rebuilt = fmt.Errorf("cannot open: %v", err)
		}
	}
	if m.repo == nil {
		if err := m.reinit(); err != nil {
			return nil, err
		}
	}
	m.rebuilt = rebuilt
	return m, nil
}

func isEmptyDir(dir string) bool {
	entries, err := safefile.ReadDir(dir, safefile.Follow)
	return errors.Is(err, fs.ErrNotExist) || (err == nil && len(entries) == 0)
}

// reinit empties dir and initialises a bare repository in it. File
// systems handed out before stop reading.
func (m *Mirror) reinit() error {
	m.gen.Add(1)
	if err := os.RemoveAll(m.dir); err != nil {
		return fmt.Errorf("mirror: remove mirror %s: %w", m.dir, err)
	}
	if err := os.MkdirAll(m.dir, 0o755); err != nil {
		return fmt.Errorf("mirror: create mirror %s: %w", m.dir, err)
	}
	m.indexes.Forget("")
	st, err := m.newMirrorStore()
	if err != nil {
		return fmt.Errorf("mirror: init mirror %s: %w", m.dir, err)
	}
	repo, err := git.Init(st, nil)
	if err != nil {
		return fmt.Errorf("mirror: init mirror %s: %w", m.dir, err)
	}
	cfg, err := repo.Config()
	if err != nil {
		return fmt.Errorf("mirror: init mirror %s: %w", m.dir, err)
	}
	cfg.Core.IsBare = true
	if err := repo.SetConfig(cfg); err != nil {
		return fmt.Errorf("mirror: init mirror %s: %w", m.dir, err)
	}
	m.repo = repo
	m.broken, m.partial = nil, false
	clear(m.complete)
	clear(m.verified)
	clear(m.replaced)
	m.pinned.Store(0)
	clear(m.trees[:])
	return nil
}

// Fetch brings the named refs ("refs/heads/main", "refs/tags/v1") up to
// date from the remote, transferring only objects the mirror lacks. A
// corrupt mirror is rebuilt first (see [FetchResult.Rebuilt]); a fetch that
// fails because of what is on disk is retried once on a rebuilt mirror. It
// honours ctx and applies [defaultFetchTimeout] when ctx has no deadline.
func (m *Mirror) Fetch(ctx context.Context, auth *gitutil.Auth, refs []string) (FetchResult, error) {
	return m.fetchRefs(ctx, auth, refs, nil)
}

// fetchRefs is Fetch, with the objects refs point at when a listing named
// them (see FetchListed).
func (m *Mirror) fetchRefs(ctx context.Context, auth *gitutil.Auth, refs []string, listed map[string]plumbing.Hash) (res FetchResult, err error) {
	ctx, cancel, topts, err := m.prepare(ctx, auth)
	if err != nil {
		return FetchResult{}, err
	}
	defer cancel()
	before := m.sent.Load()
	defer func() { res.Requests = int(m.sent.Load() - before) }()
	defer m.lockToWrite()()
	if err := m.lister.HostLimit(m.host); err != nil {
		// Set while this fetch waited for the mirror's lock.
		return FetchResult{}, fmt.Errorf("fetch %s: %w", gitutil.RedactURL(m.url), err)
	}
	m.lastAuth = auth

	res = FetchResult{Refs: map[string]gitutil.Hash{}, Rebuilt: m.rebuilt}
	m.rebuilt = nil
	if m.broken != nil {
		res.Rebuilt = m.broken
		if err := m.reinit(); err != nil {
			return res, err
		}
	}
	fetched, err := m.fetch(ctx, topts, refs, listed)
	if err == nil {
		err = m.verify(refs, &res)
	}
	if err == nil && fetched {
		// What the fetch did not read may have been damaged meanwhile:
		// found now, it costs one fetch, not a failed delivery.
		err = packcheck.Packs(m.dir, false)
	}
	if err == nil && fetched {
		// A failed repack leaves the mirror as the fetch made it: whole.
		res.Repacked, res.RepackErr = m.maintain(ctx)
	}
	m.dropReplaced() // those that readers held, now collected
	if reason := m.damage(err); reason != nil && res.Rebuilt == nil {
		res.Rebuilt = reason
		if rerr := m.reinit(); rerr != nil {
			return res, rerr
		}
		clear(res.RefErrors)
		fetched, err = m.fetch(ctx, topts, refs, nil)
		if err == nil {
			err = m.verify(refs, &res)
		}
	}
	if err != nil {
		return res, &gitutil.RemoteError{Op: "fetch", URL: m.url, Err: err}
	}
	res.Fetched = fetched
	return res, nil
}

// verify checks that every ref names a commit that is readable, and
// records it in res.Refs. A ref that names something else is that ref's
// error, in res.RefErrors; a ref whose commit is missing means the store
// lost objects (an error the damage decision takes as such).
func (m *Mirror) verify(refs []string, res *FetchResult) error {
	for _, name := range refs {
		h, err := m.refCommit(name)
		if errors.Is(err, ErrNotCommit) {
			if res.RefErrors == nil {
				res.RefErrors = map[string]error{}
			}
			res.RefErrors[name] = err
			continue
		}
		if err != nil {
			return err
		}
		if _, err := m.repo.CommitObject(h); err != nil {
			return fmt.Errorf("ref %s points at unreadable commit %s: %w", name, h, err)
		}
		res.Refs[name] = gitutil.Hash(h)
	}
	return nil
}

func (m *Mirror) fetch(ctx context.Context, topts gitutil.Transport, refs []string, listed map[string]plumbing.Hash) (bool, error) {
	if len(refs) == 0 {
		return false, nil
	}
	if m.opts.Filter != "" || (m.opts.CLIFetches && m.opts.GitCLI != "") {
		return m.fetchGitPartial(ctx, topts, refs)
	}
	if listed != nil && m.partialCapable() {
		if fetched, done, err := m.fetchPartial(ctx, topts, refs, listed); done {
			return fetched, err
		}
	}
	if fetched, done, err := m.fetchCLIShallow(ctx, topts, refs); done {
		return fetched, err
	}
	if listed != nil && m.directFetchable() {
		fetched, err := m.fetchDirect(ctx, topts, listed)
		if err == nil || ctx.Err() != nil || errors.Is(err, gitutil.ErrRateLimited) {
			return fetched, err // a host that limits is not asked again
		}
		// A ref that moved since the listing, a server that wants the
		// advertisement first: fetch as go-git does.
	}
	specs, err := refSpecs(refs)
	if err != nil {
		return false, err
	}
	empty := m.isEmpty()
	cloned := false
	if empty && m.opts.GitCLI != "" && m.opts.FirstFetchDepth == 0 {
		var done bool
		if cloned, done, err = m.cliFirstFetch(ctx, topts, refs, listed); done || err != nil {
			return cloned, err
		}
	}
	depth := 0
	if m.opts.FirstFetchDepth > 0 && empty {
		depth = m.opts.FirstFetchDepth
	}
	fetched, err := m.goGitFetch(ctx, topts, specs, depth)
	return fetched || cloned, err
}

// cliFirstFetch is the git CLI's first fetch into an empty mirror: one
// request of the listed objects (firstFetch), else a clone of the first
// branch or tag of refs. done reports that the fetch is over (the
// request, or the clone and a request of the other listed refs); cloned,
// that the clone brought what go-git's fetch after it need not. A CLI
// that fails is reported to OnFallback, and go-git fetches into an empty
// mirror again. Callers hold m.mu.
func (m *Mirror) cliFirstFetch(ctx context.Context, topts gitutil.Transport, refs []string, listed map[string]plumbing.Hash) (cloned, done bool, err error) {
	if listed != nil {
		if done, err := m.firstFetch(ctx, topts, listed, ""); done || err != nil {
			return done, true, err
		}
	}
	e, _ := gitutil.ParseURL(m.url)
	if err := m.cliClone(ctx, e, topts, refs, ""); err != nil {
		if final(ctx, err) {
			return false, true, err
		}
		m.fellBack(err)
		return false, false, m.reinit()
	}
	if listed != nil && m.directFetchable() {
		// The clone has the branch; the other listed refs (tags) are
		// asked for in one request, if the clone lacks their objects.
		if _, err := m.fetchDirect(ctx, topts, listed); err == nil || ctx.Err() != nil || errors.Is(err, gitutil.ErrRateLimited) {
			return true, true, err
		}
	}
	return true, false, nil
}

// refSpecs are the refspecs that fetch each of refs to itself, forced
// (each starts with "+": none reads as an option on git's command line).
func refSpecs(refs []string) ([]config.RefSpec, error) {
	specs := make([]config.RefSpec, 0, len(refs))
	for _, r := range refs {
		spec := config.RefSpec("+" + r + ":" + r)
		if err := spec.Validate(); err != nil {
			return nil, fmt.Errorf("ref %q: %w", r, err)
		}
		specs = append(specs, spec)
	}
	return specs, nil
}

// prepare checks auth against the URL and bounds ctx by
// defaultFetchTimeout when it has no deadline.
func (m *Mirror) prepare(ctx context.Context, auth *gitutil.Auth) (context.Context, context.CancelFunc, gitutil.Transport, error) {
	e, err := gitutil.ParseURL(m.url)
	if err != nil {
		return ctx, nil, gitutil.Transport{}, err
	}
	topts, err := auth.Transport(e)
	if err != nil {
		return ctx, nil, topts, fmt.Errorf("fetch %s: %w", gitutil.RedactURL(m.url), err)
	}
	if err := m.lister.HostLimit(m.host); err != nil {
		// No request while the host's rate limit holds.
		return ctx, nil, topts, fmt.Errorf("fetch %s: %w", gitutil.RedactURL(m.url), err)
	}
	cancel := context.CancelFunc(func() {})
	if _, ok := ctx.Deadline(); !ok {
		ctx, cancel = context.WithTimeout(ctx, defaultFetchTimeout)
	}
	return ctx, cancel, topts, nil
}

// goGitFetch fetches specs with go-git; it reports whether anything was
// transferred. Callers hold m.mu.
func (m *Mirror) goGitFetch(ctx context.Context, topts gitutil.Transport, specs []config.RefSpec, depth int) (bool, error) {
	m.sent.Add(2)
	remote := git.NewRemote(m.repo.Storer, &config.RemoteConfig{Name: "origin", URLs: []string{m.url}})
	err := remote.FetchContext(ctx, &git.FetchOptions{
		RefSpecs:        specs,
		Depth:           depth,
		Auth:            topts.Method,
		CABundle:        topts.CABundle,
		InsecureSkipTLS: topts.InsecureSkipTLS,
		ProxyOptions:    topts.Proxy,
		Tags:            git.NoTags,
		Force:           true,
		Progress:        progressWriter{&m.progress},
	})
	switch {
	case errors.Is(err, git.NoErrAlreadyUpToDate):
		return false, nil
	case err != nil:
		return false, m.rateLimit(err)
	}
	return true, nil
}

// rateLimit is err, or the rate limit its answer carries (see
// gitutil.AsRateLimit).
func (m *Mirror) rateLimit(err error) error {
	if rl := gitutil.AsRateLimit(err, m.host); rl != nil {
		m.lister.NoteLimit(rl)
		return rl
	}
	return err
}

// Progress is a number that grows while a fetch into the mirror makes
// progress: the size of the pack data received so far, and of the server's
// progress messages. A caller that sees it unchanged for a while can take
// the fetch for stalled (the watcher does). It reads the pack directory:
// call it every second or so, not in a loop.
func (m *Mirror) Progress() int64 {
	n := m.progress.Load()
	for _, d := range []string{m.dir, m.dir + ".clone"} {
		entries, _ := safefile.ReadDir(filepath.Join(d, "objects", "pack"), safefile.NoFollow)
		for _, e := range entries {
			if info, err := e.Info(); err == nil {
				n += info.Size()
			}
		}
	}
	return n
}

// progressWriter counts what it is given.
type progressWriter struct{ n *atomic.Int64 }

func (w progressWriter) Write(p []byte) (int, error) {
	w.n.Add(int64(len(p)))
	return len(p), nil
}

// FetchCommit makes sure a commit that no ref may point at is in the
// mirror, asking the remote for it by SHA. It does nothing when the commit is
// already there. go-git asks in protocol version 0, in which a server
// gives a commit no ref points at only with
// uploadpack.allowReachableSHA1InWant (GitHub and GitLab have it); when
// that brings nothing and there is a git CLI, the CLI asks again, in
// version 2, which needs no such setting.
func (m *Mirror) FetchCommit(ctx context.Context, auth *gitutil.Auth, c gitutil.Hash) (res FetchResult, err error) {
	commit := plumbing.Hash(c)
	m.mu.Lock()
	_, err = m.repo.CommitObject(commit)
	present := m.broken == nil && err == nil
	m.unlock()
	if present {
		return FetchResult{}, nil
	}
	name := "refs/modwatch/commits/" + commit.String()
	ctx, cancel, topts, err := m.prepare(ctx, auth)
	if err != nil {
		return FetchResult{}, err
	}
	defer cancel()
	before := m.sent.Load()
	defer func() { res.Requests = int(m.sent.Load() - before) }()
	defer m.lockToWrite()()
	if err := m.lister.HostLimit(m.host); err != nil {
		return FetchResult{}, fmt.Errorf("fetch %s: %w", gitutil.RedactURL(m.url), err)
	}
	cliOnly := m.opts.CLIFetches && m.opts.GitCLI != ""
	if m.opts.Filter != "" || cliOnly {
		// go-git cannot filter: the CLI asks (in version 2), filtered.
		err = m.cliFetch(ctx, topts, m.shallowArgs(), "+"+commit.String()+":"+name)
	} else {
		_, err = m.goGitFetch(ctx, topts, []config.RefSpec{config.RefSpec(commit.String() + ":" + name)}, 0)
	}
	if _, cerr := m.repo.CommitObject(commit); cerr != nil && m.opts.GitCLI != "" && m.opts.Filter == "" && !cliOnly && !final(ctx, err) {
		err = m.cliFetch(ctx, topts, nil, commit.String()+":"+name)
	}
	if err != nil {
		return FetchResult{}, &gitutil.RemoteError{Op: "fetch commit " + commit.String(), URL: m.url, Err: err}
	}
	if _, err := m.repo.CommitObject(commit); err != nil {
		if o, oerr := m.repo.Storer.EncodedObject(plumbing.AnyObject, commit); oerr == nil {
			return FetchResult{}, fmt.Errorf("fetch %s: %w: %s is a %s", gitutil.RedactURL(m.url), ErrNotCommit, commit, o.Type())
		}
		return FetchResult{}, fmt.Errorf("fetch %s: %w: %s", gitutil.RedactURL(m.url), ErrCommitNotFound, commit)
	}
	return FetchResult{Fetched: true, Refs: map[string]gitutil.Hash{name: c}}, nil
}

// fellBack reports err, the git CLI's, to OnFallback once m.mu is let go:
// go-git stands in. Callers hold m.mu.
func (m *Mirror) fellBack(err error) {
	if f := m.opts.OnFallback; f != nil {
		m.note(func() { f(err) })
	}
}

// note has call made once m.mu is let go (see unlock). Callers hold m.mu.
func (m *Mirror) note(call func()) {
	m.notes = append(m.notes, call)
	m.noted.Store(true)
}

// lockToWrite takes m.mu for an operation that may write into the mirror,
// and returns what ends it: whatever the operation's end (an error, a
// stop, a panic), what it left among the mirror's temporaries is removed,
// then m.mu released. Use it as
//
//	defer m.lockToWrite()()
func (m *Mirror) lockToWrite() (unlock func()) {
	m.mu.Lock()
	before := leftovers.Note(m.dir)
	return func() {
		defer m.unlock()
		before.Clear(m.dir)
	}
}

// unlock lets m.mu go, then makes the calls noted under it: the program's
// code never runs under the mirror's lock, and may call the mirror. A
// file system's read that found damage holds its own lock: it lets m.mu
// go plainly, and tells once it let its own go (see tell).
func (m *Mirror) unlock() {
	notes := m.notes
	m.notes = nil
	m.noted.Store(false)
	m.mu.Unlock()
	for _, call := range notes {
		call()
	}
}

// tell makes the calls noted and not made yet; the caller holds no lock
// of the mirror or of its file systems.
func (m *Mirror) tell() {
	if m.noted.Load() {
		m.mu.Lock()
		m.unlock()
	}
}

func (m *Mirror) isEmpty() bool {
	iter, err := m.repo.References()
	if err != nil {
		return true
	}
	defer iter.Close()
	empty := true
	_ = iter.ForEach(func(r *plumbing.Reference) error {
		if r.Type() == plumbing.HashReference {
			empty = false
			return errStop
		}
		return nil
	})
	return empty
}

var errStop = errors.New("stop")

// refCommit is the commit a local ref points at, peeling annotated tags;
// a ref that leads to anything else is an error wrapping [ErrNotCommit]
// that names what it leads to. Callers hold m.mu.
func (m *Mirror) refCommit(name string) (plumbing.Hash, error) {
	ref, err := m.repo.Reference(plumbing.ReferenceName(name), true)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("ref %s: %w", name, err)
	}
	h := ref.Hash()
	for range 10 {
		o, err := m.repo.Storer.EncodedObject(plumbing.AnyObject, h)
		if err != nil {
			return plumbing.ZeroHash, fmt.Errorf("ref %s: object %s: %w", name, h, err)
		}
		switch o.Type() {
		case plumbing.CommitObject:
			return h, nil
		case plumbing.TagObject:
			tag, err := object.DecodeTag(m.repo.Storer, o)
			if err != nil {
				return plumbing.ZeroHash, m.markCorrupt(err)
			}
			h = tag.Target
		default:
			return plumbing.ZeroHash, fmt.Errorf("%w: %s names a %s (%s)", ErrNotCommit, name, o.Type(), h)
		}
	}
	return plumbing.ZeroHash, fmt.Errorf("%w: %s is a chain of more than 10 tags", ErrNotCommit, name)
}

// HasCommit reports whether commit is in the mirror. A mirror found
// damaged has nothing until a [Mirror.Fetch] rebuilds it. It looks the
// name up in the pack indexes (and loose objects) without reading the
// object, as a poll asks it of every target: an object of that name that
// is not a commit fails when it is read as one.
func (m *Mirror) HasCommit(c gitutil.Hash) bool {
	m.mu.Lock()
	defer m.unlock()
	if m.broken != nil {
		return false
	}
	return m.repo.Storer.HasEncodedObject(plumbing.Hash(c)) == nil
}

// commit reads a commit; callers hold m.mu.
func (m *Mirror) commit(h plumbing.Hash) (*object.Commit, error) {
	c, err := m.repo.CommitObject(h)
	if errors.Is(err, plumbing.ErrObjectNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrCommitNotFound, h)
	}
	if err != nil {
		return nil, m.markCorrupt(err)
	}
	return c, nil
}

// markCorrupt records a read failure that means the store is damaged, so
// the next Fetch rebuilds; callers hold m.mu.
func (m *Mirror) markCorrupt(err error) error {
	reason := m.damage(err)
	if reason == nil {
		return err
	}
	if m.broken == nil {
		m.broken = reason
		if f := m.opts.OnDamage; f != nil {
			m.note(func() { f(reason) })
		}
	}
	return fmt.Errorf("%w: %w", ErrCorrupt, err)
}

// readFailed is markCorrupt for the file systems handed out: a read error
// of one made from the current store marks it damaged. It lets m.mu go
// plainly: the caller, which may hold a file system's lock, tells.
func (m *Mirror) readFailed(gen uint64, err error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if gen != m.gen.Load() {
		return fmt.Errorf("%w: %w", ErrRebuilt, err)
	}
	return m.markCorrupt(err)
}

// isRemoteError tells errors the remote answered with.
func isRemoteError(err error) bool {
	for _, target := range []error{
		transport.ErrAuthenticationRequired, transport.ErrAuthorizationFailed,
		transport.ErrRepositoryNotFound, transport.ErrEmptyRemoteRepository,
		transport.ErrInvalidAuthMethod,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}
