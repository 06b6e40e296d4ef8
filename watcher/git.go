package watcher

import (
	"context"
	"io/fs"
	"os/exec"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/mirror"
)

// Git is the watcher's seam over git: listing a remote's refs, and the
// local copy of a remote that it fetches into and reads trees from. The
// default is [DefaultGit] (gitutil: go-git, and the git CLI for a first
// clone when there is one); [WithGit] puts another in its place (a [GoGit]
// of other settings), or wraps it (to count, to inject faults, to cache).
type Git interface {
	// ListRefs lists the refs of the repository at url under prefixes
	// (every ref when there is none).
	ListRefs(ctx context.Context, url string, auth *gitutil.Auth, prefixes []string) (gitutil.RefList, error)
	// OpenMirror opens the local copy of url in dir, creating it when dir
	// is empty or missing. The watcher owns dir: one per remote.
	OpenMirror(dir, url string, opts mirror.Options) (Mirror, error)
}

// Mirror is the local copy of one remote (its URL and credentials), as the
// watcher fetches into it and reads from it: the three parts below, split
// by what the scheduler does with each. A poll fetches (MirrorFetcher), a
// delivery only reads (MirrorReader: a deliverer is handed nothing more),
// and a target with Verify has its commit or tag checked
// (MirrorVerifier). Its methods are safe for concurrent use; a read of a
// commit it lacks returns an error wrapping mirror.ErrCommitNotFound.
type Mirror interface {
	MirrorFetcher
	MirrorReader
	MirrorVerifier
}

// MirrorFetcher brings objects from the remote into a mirror.
type MirrorFetcher interface {
	// FetchListed brings refs (full name → the object a listing just
	// saw it at) from the remote and returns the commits they point at.
	FetchListed(ctx context.Context, auth *gitutil.Auth, listed map[string]gitutil.Hash) (mirror.FetchResult, error)
	// FetchCommit brings one commit that no ref names.
	FetchCommit(ctx context.Context, auth *gitutil.Auth, commit gitutil.Hash) (mirror.FetchResult, error)
	// Progress is a number that grows while a fetch receives data; the
	// watcher gives up a fetch that stops making progress.
	Progress() int64
}

// MirrorReader reads what a mirror holds, never the network.
type MirrorReader interface {
	// HasCommit reports whether the commit is in the mirror.
	HasCommit(commit gitutil.Hash) bool
	// TreeHash returns a hash of what the selection keeps in commit (for a
	// plain path, the hash of the tree there): two commits with the same
	// hash deliver the same files. Evaluating the selection honours ctx.
	TreeHash(ctx context.Context, commit gitutil.Hash, sel mirror.Selection) (gitutil.Hash, error)
	// IsAncestor reports whether ancestor is commit or one of its
	// ancestors.
	IsAncestor(ctx context.Context, ancestor, commit gitutil.Hash) (bool, error)
	// ChangedPaths returns the paths the selection keeps that differ
	// between the two commits, relative to its Path; nil when unknown.
	ChangedPaths(ctx context.Context, from, to gitutil.Hash, sel mirror.Selection) ([]string, error)
	// FS returns what the selection keeps in commit, read-only, readable
	// for as long as it is referenced (see Change.FS). If it is an
	// io.Closer, the watcher closes it when the delivery is over, and it
	// must stay readable after that. Once the delivery is over, the
	// watcher hands it on with mirror.Detach, which bounds what a
	// gitutil mirror's file systems kept hold ([WithKeptTrees]).
	FS(commit gitutil.Hash, sel mirror.Selection) (fs.FS, error)
	// Submodules lists the submodules the selection keeps in commit (their
	// paths relative to its Path, URLs and pinned commits); FS leaves them
	// out.
	Submodules(ctx context.Context, commit gitutil.Hash, sel mirror.Selection) ([]mirror.Submodule, error)
}

// PathFetcher is implemented by a Mirror that may hold only some of a
// commit's files (a partial mirror: see [GoGit].Partial). Before a target's
// new commit is checked and delivered, the watcher asks it for the files
// under the target's paths ([mirror.Selection.Roots]), once per commit
// for all the targets of a poll. A Mirror that does not implement it holds
// every file of what it fetched.
type PathFetcher interface {
	// Partial reports whether the mirror may lack files: when it does not,
	// FetchPaths is not called (nor a fetch slot taken for it).
	Partial() bool
	// FetchPaths brings the files under paths (relative to the
	// repository's root; "" is all of it) at commit that the mirror lacks.
	FetchPaths(ctx context.Context, auth *gitutil.Auth, commit gitutil.Hash, paths []string) error
}

// MirrorVerifier checks signatures against trusted keys.
type MirrorVerifier interface {
	// VerifyCommit checks the commit's signature against keyRing and
	// returns the signer; an unverified commit is mirror.ErrUnverified.
	VerifyCommit(commit gitutil.Hash, keyRing string) (string, error)
	// VerifyTag is VerifyCommit for the annotated tag at ref in the
	// mirror, which must lead to commit.
	VerifyTag(ref string, commit gitutil.Hash, keyRing string) (string, error)
}

// GoGit is the [Git] of gitutil: a [gitutil.Lister]'s ListRefs and
// mirror.Open, with the settings of the mirrors it opens. Its zero value
// fetches with go-git only; [DefaultGit] is the watcher's default.
type GoGit struct {
	// GitCLI is the git binary that makes the first fetch into an empty
	// mirror ("": go-git makes every fetch) and repacks. On a large
	// repository the CLI's first fetch is several times faster and smaller
	// than go-git's (docs/performance.md); every later fetch is go-git's,
	// incremental, and as cheap as the CLI's. See
	// [mirror.Options.GitCLI].
	GitCLI string
	// FirstFetchDepth limits the history of the first fetch into an empty
	// mirror; 0 fetches full history. See
	// [mirror.Options.FirstFetchDepth] for what a shallow mirror
	// cannot do: force-pushes are then delivered as new commits without
	// changed paths.
	FirstFetchDepth int
	// RepackPacks is how many packs a mirror may hold before a fetch
	// repacks it (0: [mirror.DefaultRepackPacks]; negative: never). Each
	// incremental fetch adds one.
	RepackPacks int
	// Partial makes new mirrors partial where the remote allows filters
	// (protocol version 2 over HTTP(S), as GitHub and GitLab): they hold
	// every commit and tree, and the files of the paths their targets read
	// ([PathFetcher]); a file read outside them (Change.Root) is fetched
	// when read. A path of a large repository then costs about the path;
	// a commit that moves costs two requests rather than one (its commits
	// and trees, then its files), so it is off by default. It needs GitCLI
	// and FirstFetchDepth 0; see [mirror.Options.Partial].
	Partial bool
	// CLIFetches makes every fetch GitCLI's, and a GitCLI that fails fails
	// the fetch: go-git never stands in (a program whose users give it
	// their git, which decides). See [mirror.Options.CLIFetches].
	CLIFetches bool
	// Lister lists refs and is shared by the mirrors GoGit opens (see
	// [mirror.Options.Lister]); nil: every listing is gitutil.ListRefs,
	// which remembers nothing. [WithGit] gives a GoGit without one a
	// Lister of the watcher's own, as [DefaultGit] does.
	Lister *gitutil.Lister
}

// DefaultGit is the watcher's git when none is given: GoGit with "git"
// from PATH, when there is one, for first fetches and repacks, and a new
// Lister.
func DefaultGit() GoGit {
	cli, _ := exec.LookPath("git")
	return GoGit{GitCLI: cli, Lister: gitutil.NewLister()}
}

var (
	_ Git         = GoGit{}
	_ Mirror      = (*mirror.Mirror)(nil)
	_ PathFetcher = (*mirror.Mirror)(nil)
)

// ListRefs implements Git, with g's Lister.
func (g GoGit) ListRefs(ctx context.Context, url string, auth *gitutil.Auth, prefixes []string) (gitutil.RefList, error) {
	if g.Lister == nil {
		return gitutil.ListRefs(ctx, url, auth, prefixes)
	}
	return g.Lister.ListRefs(ctx, url, auth, prefixes)
}

// OpenMirror implements Git: opts are the watcher's (TempDir, OnDamage),
// the rest g's settings.
func (g GoGit) OpenMirror(dir, url string, opts mirror.Options) (Mirror, error) {
	opts.GitCLI, opts.FirstFetchDepth, opts.RepackPacks, opts.Partial = g.GitCLI, max(g.FirstFetchDepth, 0), g.RepackPacks, g.Partial
	opts.CLIFetches, opts.Lister = g.CLIFetches, g.Lister
	m, err := mirror.Open(dir, url, opts)
	if err != nil {
		return nil, err
	}
	return m, nil
}
