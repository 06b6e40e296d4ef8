package watcher

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/mirror"
)

// Target is one thing to watch: a path in a repository at a revision.
type Target struct {
	// ID names the target, stable and unique across the watcher's sources
	// (for instance "gitsync/<namespace>/<name>"). Checkpoints are kept by ID.
	ID string
	// URL is the repository, in any form git accepts.
	URL string
	// Revision is a branch, tag, full ref, full commit SHA or semver range
	// over tags; "" follows the remote's HEAD. See [gitutil.ParseRevision].
	Revision string
	// Path is the directory inside the repository to watch; "" is the whole
	// repository. It may not contain "..".
	Path string
	// Paths, when set, narrow the target to these files and directories
	// under Path (Flux's sparseCheckout, Argo CD's several paths): a change
	// under any of them is a change, and Change.FS shows Path with only
	// them (and the directories on the way) in it. Each must exist.
	Paths []string
	// Ignore hides what these patterns match, in .gitignore syntax, as a
	// .gitignore at Path would (Flux's spec.ignore, a line each): a commit
	// that changes only hidden files is not a change, and Change.FS and
	// Change.Paths leave them out.
	Ignore []string
	// IgnoreFile names the ignore files read from the repository in each
	// directory under Path (".sourceignore" for Flux), in the same syntax;
	// "" reads none.
	IgnoreFile string
	// RecurseSubmodules puts the submodules in Change.FS, at the commits
	// the repository pins, and theirs in turn (Flux's recurseSubmodules;
	// off by default, as there). Each submodule's repository is mirrored
	// once for every target and fetched by the pinned commit. It is
	// fetched with the target's own Auth when it is on the same host,
	// anonymously on another; without an Auth, with what the watcher's
	// credential resolver gives for its URL, as for a target naming it.
	// Ignore patterns apply to the repository's own tree, not to what the
	// submodules hold, and a moved pin shows in Change.Paths as the
	// submodule's path.
	RecurseSubmodules bool
	// Interval is how often to poll; 0 uses the watcher's interval. A remote
	// is polled at the shortest interval of its targets, never more often
	// than the watcher's floor (see [WithMinInterval]).
	Interval time.Duration
	// Timeout bounds the git requests of a poll of the target's remote
	// (Flux's spec.timeout): the remote's listing and fetches take at most
	// the longest Timeout of its targets, a target without one counting as
	// the watcher's own ([WithTimeouts]), which none exceeds, and a
	// listing never more than the watcher's list timeout. 0 is the
	// watcher's.
	Timeout time.Duration
	// Auth, when set, is used instead of what the watcher's
	// [gitutil.CredentialResolver] finds for URL.
	Auth *gitutil.Auth
	// Payload is opaque to the watcher and passed to sinks in the Change
	// (for instance a render type and a destination). A change of Payload is
	// a change of the target: it is delivered again.
	Payload any
	// Suspend stops the deliveries of the target (Flux's suspend,
	// Numaplane's automatedSyncDisabled): it is still polled, and its
	// failures reported, but no commit is handed to its sinks
	// ([EventSuspended] instead), a retry of a failed delivery included,
	// until it is resumed, which delivers the latest commit. A change of
	// Suspend alone is not a change of what is delivered.
	Suspend bool
	// Verify, when set, makes the watcher deliver only what it verifies
	// the OpenPGP or SSH signature of (Flux's verify): an unsigned commit
	// or tag, or one signed by another key, fails the target with
	// mirror.ErrUnverified and the last delivery stays.
	Verify *Verify
}

// VerifyMode says what is verified, as Flux's verify.mode.
type VerifyMode string

// The verify modes.
const (
	// VerifyHEAD verifies the commit (the default).
	VerifyHEAD VerifyMode = "HEAD"
	// VerifyTag verifies the annotated tag the revision resolved through.
	VerifyTag VerifyMode = "Tag"
	// VerifyTagAndHEAD verifies both.
	VerifyTagAndHEAD VerifyMode = "TagAndHEAD"
)

// Verify says whose signatures a target's commits must carry.
type Verify struct {
	// Mode is VerifyHEAD ("" too), VerifyTag or VerifyTagAndHEAD. The tag
	// modes need a revision that resolves through an annotated tag.
	Mode VerifyMode
	// KeyRing holds the trusted public keys: OpenPGP keys, armored, and
	// SSH keys as authorized_keys lines (git signs with either); several
	// may follow each other. See [mirror.ParseKeyRing].
	KeyRing string
}

// commit and tag say what the mode verifies.
func (v Verify) commit() bool { return v.Mode != VerifyTag }
func (v Verify) tag() bool    { return v.Mode == VerifyTag || v.Mode == VerifyTagAndHEAD }

// ErrInvalidTarget is returned (wrapped) by [Target.Validate].
var ErrInvalidTarget = errors.New("watcher: invalid target")

// Validate checks the target and says which field is wrong.
func (t Target) Validate() error {
	_, err := t.validate()
	return err
}

// validate is Validate that returns the parsed URL: a target entering the
// watcher has its URL parsed here, once.
func (t Target) validate() (gitutil.Endpoint, error) {
	if t.ID == "" {
		return gitutil.Endpoint{}, fmt.Errorf("%w: id is empty", ErrInvalidTarget)
	}
	ep, err := gitutil.ParseURL(t.URL)
	if err != nil {
		return ep, fmt.Errorf("%w %s: url: %w", ErrInvalidTarget, t.ID, err)
	}
	return ep, t.validateRest()
}

// validateRest checks what Validate checks besides the ID and the URL.
func (t Target) validateRest() error {
	if _, err := gitutil.ParseRevision(t.Revision); err != nil {
		return fmt.Errorf("%w %s: revision: %w", ErrInvalidTarget, t.ID, err)
	}
	if _, err := mirror.CleanPath(t.Path); err != nil {
		return fmt.Errorf("%w %s: path: %w", ErrInvalidTarget, t.ID, err)
	}
	if err := t.Selection().Validate(); err != nil {
		return fmt.Errorf("%w %s: %w", ErrInvalidTarget, t.ID, err)
	}
	if t.Interval < 0 {
		return fmt.Errorf("%w %s: interval is negative", ErrInvalidTarget, t.ID)
	}
	if t.Timeout < 0 {
		return fmt.Errorf("%w %s: timeout is negative", ErrInvalidTarget, t.ID)
	}
	if t.Verify != nil {
		switch t.Verify.Mode {
		case "", VerifyHEAD, VerifyTag, VerifyTagAndHEAD:
		default:
			return fmt.Errorf("%w %s: verify: mode %q is not HEAD, Tag or TagAndHEAD", ErrInvalidTarget, t.ID, t.Verify.Mode)
		}
		if _, err := mirror.ParseKeyRing(t.Verify.KeyRing); err != nil {
			return fmt.Errorf("%w %s: verify: %w", ErrInvalidTarget, t.ID, err)
		}
	}
	return nil
}

// Selection is what the target watches of its repository's tree.
func (t Target) Selection() mirror.Selection {
	return mirror.Selection{Path: t.Path, Paths: t.Paths, Ignore: t.Ignore, IgnoreFile: t.IgnoreFile}
}

// fingerprint digests what, besides the commit, decides what a sink does
// with a target whose URL's key ([gitutil.Endpoint.Key]) is urlKey; a
// different fingerprint means the target changed.
func (t Target) fingerprint(urlKey string) string {
	p, _ := mirror.CleanPath(t.Path)
	payload, err := json.Marshal(t.Payload)
	if err != nil {
		payload = fmt.Appendf(nil, "%#v", t.Payload)
	}
	data := fmt.Appendf(nil, "%s\x00%s\x00%s\x00%s", urlKey, t.Revision, p, payload)
	if len(t.Paths) > 0 || len(t.Ignore) > 0 || t.IgnoreFile != "" {
		// Only when set: a target without them is digested without them.
		data = fmt.Appendf(data, "\x00%q\x00%q\x00%s", t.Paths, t.Ignore, t.IgnoreFile)
	}
	if t.RecurseSubmodules {
		data = append(data, "\x00submodules"...)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:12])
}

// Reason says why a Change is delivered.
type Reason string

// The reasons for a delivery.
const (
	// ReasonInitial: the sink has no checkpoint for the target.
	ReasonInitial Reason = "Initial"
	// ReasonNewCommit: the revision moved forward and the path changed (or
	// the sink takes every commit: [EveryCommit]).
	ReasonNewCommit Reason = "NewCommit"
	// ReasonForcePush: the new commit does not descend from the delivered
	// one (history was rewritten, or a tag moved back).
	ReasonForcePush Reason = "ForcePush"
	// ReasonTargetChanged: the target's revision, path (or paths and
	// ignore patterns), URL or payload changed.
	ReasonTargetChanged Reason = "TargetChanged"
	// ReasonResync: a periodic delivery of the same commit, for drift
	// correction.
	ReasonResync Reason = "Resync"
)

// Change is what a sink is handed: a target at a commit.
type Change struct {
	Target Target
	// Ref is the full ref the commit was resolved from ("refs/heads/main"),
	// or "" for a commit-pinned target.
	Ref string
	// From is the commit delivered before to this sink, zero on the first
	// delivery. To is the commit to act on. Hash.String gives their text.
	From, To gitutil.Hash
	Reason   Reason
	// Paths are the files added, changed or deleted in what the target
	// selects between From and To, relative to Target.Path; nil when
	// unknown (first delivery, resync, From no longer in the mirror, or an
	// ignore file changed).
	Paths []string
	// FS is a read-only view of Target.Path at To, narrowed to its Paths
	// and without what its ignore patterns hide, with its submodules when
	// the target recurses into them. It is safe for concurrent use and
	// reads the same tree while the sink keeps it, after Deliver returns
	// too, through fetches and repacks (the packs it reads stay on disk
	// until it is garbage collected), within a bound: once more trees
	// handed to sinks are kept than [WithKeptTrees] allows, the oldest is
	// released and its reads fail with mirror.ErrReleased (its packs go).
	// When it is an io.Closer, the watcher closes it after Deliver: that
	// lets go of the files it holds open, and a later read opens them
	// again. A mirror rebuilt since (it was found damaged) makes a later
	// read fail with mirror.ErrRebuilt. An event's Change has none.
	FS fs.FS
	// Root is the whole repository at To, read-only, as FS is and for as
	// long: for a sink that reads outside Target.Path (a kustomize overlay
	// whose base is "../../base"), confined to the repository. What it
	// reads there is worth reporting (see [Dependent]). An event's Change
	// has none.
	Root fs.FS
	// Submodules are the paths, relative to Target.Path, of the submodules
	// under it that FS leaves out (the target does not recurse into them):
	// the watcher reports them ([EventSubmodulesLeftOut]) rather than
	// deliver an incomplete tree without a word.
	Submodules []string
	// Verified are the signatures checked for To, as Target.Verify asked:
	// its annotated tag's, then its own; nil for a target without Verify.
	Verified []Signature
}

// Signature is a signature checked for a commit delivered.
type Signature struct {
	// Kind is "tag" or "commit", and Name the tag's name or the commit's
	// hash.
	Kind, Name string
	// Signer is the key that signed it: an OpenPGP key's name or ID, an
	// SSH key's SHA256 fingerprint (see mirror.Mirror.VerifyCommit).
	Signer string
}

// Source says what to watch.
type Source interface {
	// Run blocks until ctx is done, calling update with the whole desired
	// set of targets at start and each time it changes (level-based: a
	// missed event is repaired by the next set). update does not block for
	// long and may be called from any goroutine. The watcher keeps the
	// slice it is given and never modifies it or what its targets refer
	// to: a source gives a new slice for each set and leaves a slice it
	// has given as it was. Run returns nil when ctx ends; any other error
	// stops the watcher.
	Run(ctx context.Context, update func([]Target)) error
}

// SourceFunc adapts a function to [Source].
type SourceFunc func(ctx context.Context, update func([]Target)) error

// Run calls f.
func (f SourceFunc) Run(ctx context.Context, update func([]Target)) error { return f(ctx, update) }

// Sink acts on a change.
type Sink interface {
	// Deliver acts on c. It blocks until done or ctx ends (ctx carries the
	// watcher's delivery timeout). An error is retried with backoff unless
	// it is [Permanent]; the checkpoint advances only when Deliver returns
	// nil. Deliver is never called concurrently for the same target.
	Deliver(ctx context.Context, c Change) error
}

// SinkFunc adapts a function to [Sink].
type SinkFunc func(ctx context.Context, c Change) error

// Deliver calls f.
func (f SinkFunc) Deliver(ctx context.Context, c Change) error { return f(ctx, c) }

// Remover is a Sink that wants to hear when a target disappears from its
// route, for instance to prune what it applied. It is not called when the
// watcher stops: a stopped watcher removes nothing.
type Remover interface {
	// Remove forgets t. An error is retried with backoff while the watcher
	// runs.
	Remove(ctx context.Context, t Target) error
}

// Forgetter is a [Remover] that can let go of a target without undoing
// what it did: the watcher calls Forget instead of Remove when a target
// leaves its set while it is suspended ([Target.Suspend]). What it applied
// stays, as Flux leaves the objects of a suspended Kustomization that is
// deleted; a sink that keeps records (an [Inventory]) drops them, so that
// no later sweep removes what the suspension kept. A Remover that is not a
// Forgetter is not called then.
type Forgetter interface {
	Remover
	Forget(ctx context.Context, t Target) error
}

// Inventory is a [Remover] that keeps what it did for each target across
// restarts (the apply sink's inventories): Targets lists the IDs of the
// targets it holds something for. Once every route's source has given its
// first set, the watcher removes those that no source wants any more — a
// target deleted while the program was not running — as it removes a
// target that leaves a set (Remove, then EventRemoved).
type Inventory interface {
	Remover
	Targets(ctx context.Context) ([]string, error)
}

// Dependent is a report of a delivery that read outside its Path. The
// delivery (see [Reporter]) read files of the repository outside the
// target's Path, through Change.Root: Reads lists them, relative to the repository's root (files or directories).
// The watcher remembers them with the checkpoint, and delivers the target
// again when a later commit changes any of them, as when its Path
// changes; a commit that changes neither is not delivered. What a
// delivery reads through symbolic links of Change.FS or Change.Root (a
// link outside the Path, where a link leads) the watcher sees itself, as
// the file systems resolve them, and remembers with the report's reads:
// a report need not, and cannot, name it.
type Dependent interface {
	Reads() []string
}

// Reporter is a Sink that says what each delivery did. The watcher calls
// DeliverReport instead of Deliver and hands the report to observers in
// [Event.Result], on success and on failure (a partial report).
type Reporter interface {
	// DeliverReport is Deliver that also returns what it did (for instance
	// the apply sink's per-object result). The report may be nil.
	DeliverReport(ctx context.Context, c Change) (report any, err error)
}

// EveryCommit is a Sink that is handed every new commit of its targets,
// those that leave what a target reads unchanged too, when EveryCommit
// returns true. The watcher otherwise records such a commit without a
// delivery ([EventUpToDate]): right for a sink that acts on the files, not
// for one that reports the commit it has, as Flux's artifacts name theirs
// (sink/fluxartifact). Such a commit is delivered as [ReasonNewCommit] (or
// [ReasonForcePush]).
type EveryCommit interface {
	Sink
	EveryCommit() bool
}

// Runnable is a Sink or an Observer with work of its own to do while the
// watcher runs (for instance keeping objects it created in place). The
// watcher runs it for as long as [Watcher.Run]; an error stops the
// watcher, as a source's does.
type Runnable interface {
	// Run blocks until ctx is done. It returns nil when ctx ends.
	Run(ctx context.Context) error
}

// Namer is a Sink with a name for logs, observers and checkpoint keys.
// Every sink of a route with several has one of its own: a sink that is
// not a Namer is named with [Named]; a route's only sink may have none
// ([DefaultSinkName]).
type Namer interface {
	Name() string
}

// Permanent marks err so that the watcher does not retry the delivery: the
// failure is reported and the target waits for its next commit or resync.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// IsPermanent reports whether err was marked with [Permanent].
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}
