package watcher

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/modwatch/modwatch/gitutil"
)

// Option configures a Watcher.
type Option func(*options)

type options struct {
	removals         removalBudget
	interval         time.Duration
	minInterval      time.Duration
	jitter           float64
	cacheDir         string
	listLimit        int
	fetchLimit       int
	deliverLimit     int
	creds            gitutil.CredentialResolver
	store            Store
	resyncFunc       func() time.Duration
	setBy            map[string][]string // the options that set each single part, in order: more than one is refused
	invalid          []string            // what options said that cannot be used, each naming its option
	noLoggerOut      io.Writer
	observers        []Observer
	retryMin         time.Duration
	retryMax         time.Duration
	listTimeout      time.Duration
	fetchTimeout     time.Duration
	deliverTimeout   time.Duration
	sinkGrace        time.Duration
	mirrorGrace      time.Duration
	stallYield       time.Duration
	stallAbort       time.Duration
	git              Git
	credentialsRetry time.Duration
	localRepos       bool
	shard            Shard
	keptTrees        int
	hostBudgets      map[string]HostBudget // by host; "" for every other
}

func defaultOptions() options {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	return options{
		interval:         time.Minute,
		minInterval:      DefaultMinInterval,
		jitter:           0.1,
		cacheDir:         filepath.Join(cache, "modwatch", "mirrors"),
		listLimit:        16,
		fetchLimit:       4,
		deliverLimit:     8,
		store:            NewMemoryStore(),
		retryMin:         time.Second,
		retryMax:         5 * time.Minute,
		listTimeout:      30 * time.Second,
		fetchTimeout:     10 * time.Minute,
		deliverTimeout:   10 * time.Minute,
		sinkGrace:        30 * time.Second,
		mirrorGrace:      time.Hour,
		stallYield:       10 * time.Second,
		stallAbort:       2 * time.Minute,
		credentialsRetry: 30 * time.Second,
		git:              DefaultGit(),
		removals:         removalBudget{share: DefaultRemovalShare, confirm: DefaultRemovalConfirm},
		noLoggerOut:      os.Stderr,
	}
}

// setOnce records that the option named set the part of the watcher
// that only one option may set: the resync, the store, the credentials,
// the cache directory, the shard, the Git. Options that program code
// composes (a library's WatcherOptions, cluster.Sharded, the program's own)
// could each set one, and the last would silently win: a second is refused.
func (o *options) setOnce(part, name string) {
	if o.setBy == nil {
		o.setBy = map[string][]string{}
	}
	o.setBy[part] = append(o.setBy[part], name)
}

// validate refuses options that contradict each other, or that cannot be
// used, naming them.
func (o *options) validate() error {
	var twice []string
	for part, by := range o.setBy {
		if len(by) > 1 {
			twice = append(twice, fmt.Sprintf("the %s is set %d times (%s)", part, len(by), strings.Join(by, ", ")))
		}
	}
	var msgs []string
	if len(twice) > 0 {
		slices.Sort(twice)
		msgs = append(msgs, strings.Join(twice, "; ")+": set each once")
	}
	msgs = append(msgs, o.invalid...)
	if len(msgs) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidOptions, strings.Join(msgs, "; "))
	}
	return nil
}

// DefaultMinInterval is the shortest poll interval a watcher accepts unless
// [WithMinInterval] says otherwise.
const DefaultMinInterval = 10 * time.Second

// WithInterval sets how often each remote is polled when its targets do not
// say (default 1m). It is raised to the floor of [WithMinInterval].
func WithInterval(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.interval = d
		}
	}
}

// WithMinInterval sets the floor of every poll interval, the watcher's and
// each target's (default [DefaultMinInterval]): a target that asks for
// "1ms" is polled every 10s, not continuously. Lower it only in tests;
// push hints ([Watcher.Trigger]) are how a change is seen at once.
func WithMinInterval(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.minInterval = d
		}
	}
}

// WithJitter spreads polls by ±fraction of the interval (default 0.1, at
// most 0.5), so that many watchers started together do not poll together.
func WithJitter(fraction float64) Option {
	return func(o *options) { o.jitter = min(max(fraction, 0), 0.5) }
}

// WithCacheDir sets the directory holding one bare mirror per remote
// (default: the user cache directory + "modwatch/mirrors"). Mirrors persist
// across restarts; one watcher per directory at a time.
func WithCacheDir(dir string) Option {
	return func(o *options) { o.cacheDir = dir; o.setOnce("cache directory", fmt.Sprintf("WithCacheDir(%q)", dir)) }
}

// Concurrency bounds what runs at once across all remotes and sinks. A
// zero field keeps its default.
type Concurrency struct {
	// Lists bounds ref listings (default 16), so that a watcher of many
	// repositories starting up does not send its hosting provider a burst.
	// One host holds half of them at most (see [HostBudget]).
	Lists int
	// Fetches bounds fetches (default 4). Lists + Fetches bound the polls
	// in progress: the workers of the pool remotes poll on. A remote
	// between polls holds none, nor does one whose poll waits in line for
	// a fetch slot, so that other remotes list meanwhile.
	Fetches int
	// Deliveries bounds the deliveries and removals in progress at once
	// (default 8): the workers of the pool a watcher's deliverers run on.
	// A target with nothing to deliver holds none.
	Deliveries int
}

// WithConcurrency sets what runs at once; see [Concurrency].
func WithConcurrency(c Concurrency) Option {
	return func(o *options) {
		if c.Lists > 0 {
			o.listLimit = c.Lists
		}
		if c.Fetches > 0 {
			o.fetchLimit = c.Fetches
		}
		if c.Deliveries > 0 {
			o.deliverLimit = c.Deliveries
		}
	}
}

// WithCredentials sets how credentials are found for a URL (default: none,
// anonymous access). A target's own Auth takes precedence.
func WithCredentials(r gitutil.CredentialResolver) Option {
	return func(o *options) { o.creds = r; o.setOnce("credentials", fmt.Sprintf("WithCredentials(%T)", r)) }
}

// WithStore sets where checkpoints are kept (default: in memory, so every
// target is delivered once after a restart). Use [NewFileStore] to survive
// restarts.
func WithStore(s Store) Option {
	return func(o *options) { o.store = s; o.setOnce("store", fmt.Sprintf("WithStore(%T)", s)) }
}

// WithResync delivers every target's current commit again (Reason
// [ReasonResync]), so that sinks can correct drift, as an informer's resync
// period does. The watcher asks period at the start and after each resync
// for the time to the next, so that an interval followed live (a
// configuration reloaded) takes effect at the next resync: 0 or less means
// none for now, and period is asked again a minute later. Use
// [ResyncEvery] for a fixed period. The default, and a nil period, is no
// resync. The resync is set once: a second WithResync makes Run fail with
// [ErrInvalidOptions], naming both, rather than one silently winning.
func WithResync(period func() time.Duration) Option {
	return func(o *options) {
		o.resyncFunc = period
		o.setOnce("resync", "WithResync")
	}
}

// ResyncEvery is the period of [WithResync] that is always d; nil (no
// resync) when d is 0 or less.
func ResyncEvery(d time.Duration) func() time.Duration {
	if d <= 0 {
		return nil
	}
	return func() time.Duration { return d }
}

// WithObserver adds observers that hear every outcome. A nil Observer is
// left out (a program's optional observer can be handed as it is).
func WithObserver(obs ...Observer) Option {
	return func(o *options) {
		for _, ob := range obs {
			if ob != nil {
				o.observers = append(o.observers, ob)
			}
		}
	}
}

// Backoff bounds an exponential backoff, with jitter: the first wait is
// about Min, each next one doubles, up to Max. A zero field keeps its
// default.
type Backoff struct {
	// Min is the first wait (default 1s).
	Min time.Duration
	// Max is the longest wait (default 5m).
	Max time.Duration
}

// Default fills the fields left at zero with the defaults.
func (b *Backoff) Default() {
	if b.Min == 0 {
		b.Min = time.Second
	}
	if b.Max == 0 {
		b.Max = 5 * time.Minute
	}
}

// Validate says what is wrong with b once defaulted: a negative bound, or a
// Max under Min.
func (b Backoff) Validate() error {
	switch {
	case b.Min < 0 || b.Max < 0:
		return fmt.Errorf("backoff: negative bound (Min %s, Max %s)", b.Min, b.Max)
	case b.Max < b.Min:
		return fmt.Errorf("backoff: Max %s is under Min %s", b.Max, b.Min)
	}
	return nil
}

// WithRetryBackoff sets the backoff between failed deliveries and failed
// polls of a remote (default [Backoff]'s, 1s to 5m; a failed poll never
// waits less than the poll interval). A Backoff that does not validate,
// once defaulted, makes Run fail with [ErrInvalidOptions].
func WithRetryBackoff(b Backoff) Option {
	return func(o *options) {
		b.Default()
		if err := b.Validate(); err != nil {
			o.invalid = append(o.invalid, fmt.Sprintf("WithRetryBackoff: %v", err))
			return
		}
		o.retryMin, o.retryMax = b.Min, b.Max
	}
}

// Timeouts bound the watcher's calls. A zero field keeps its default.
type Timeouts struct {
	// List bounds one ref listing (default 30s).
	List time.Duration
	// Fetch bounds one fetch (default 10m).
	Fetch time.Duration
	// Deliver bounds one delivery (default 10m).
	Deliver time.Duration
	// StallYield and StallAbort say how a fetch that makes no progress (no
	// pack data, no progress message from the server) is treated: after
	// StallYield (default 10s) it gives its slot of Concurrency.Fetches to
	// other remotes, so that stalled remotes cannot hold every slot; after
	// StallAbort (default 2m) it is cancelled with [ErrFetchStalled] and
	// retried at the next poll. A slow fetch that still makes progress
	// keeps its slot, up to Fetch.
	StallYield, StallAbort time.Duration
	// SinkGrace is how long a sink may go on after its ctx ended (Deliver
	// passed, or the watcher stopping) before the watcher stops waiting
	// for it (default 30s). The delivery then counts as failed and is
	// retried; its slot is freed for other deliveries; Run returns. The
	// call itself cannot be stopped: its goroutine is abandoned, and runs
	// until the sink returns ([Stats.Abandoned] counts them). A sink that
	// honours ctx is never abandoned.
	SinkGrace time.Duration
}

// WithTimeouts sets the watcher's timeouts; see [Timeouts].
func WithTimeouts(t Timeouts) Option {
	return func(o *options) {
		for _, f := range []struct {
			dst *time.Duration
			v   time.Duration
		}{
			{&o.listTimeout, t.List}, {&o.fetchTimeout, t.Fetch}, {&o.deliverTimeout, t.Deliver},
			{&o.stallYield, t.StallYield}, {&o.stallAbort, t.StallAbort}, {&o.sinkGrace, t.SinkGrace},
		} {
			if f.v > 0 {
				*f.dst = f.v
			}
		}
	}
}

// WithMirrorGrace sets how long a mirror no target uses stays in the cache
// directory before it is removed (default 1h), counted from its last use
// across restarts: when its remote ended, or, for a process that was
// killed, its last poll to within an eighth of the grace. A target that
// comes back within it needs no new clone.
// Only mirrors are removed, and only once every source has given its set.
func WithMirrorGrace(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.mirrorGrace = d
		}
	}
}

// WithGit sets the watcher's git (default [DefaultGit]): how refs are
// listed and mirrors opened, with its settings (a [GoGit]'s git CLI, first
// fetch depth, repack threshold). A nil git keeps the default.
// A GoGit without a Lister gets one of the watcher's own.
func WithGit(g Git) Option {
	return func(o *options) {
		if gg, ok := g.(GoGit); ok && gg.Lister == nil {
			gg.Lister = gitutil.NewLister() // the watcher's own
			g = gg
		}
		if g != nil {
			o.git = g
		}
		o.setOnce("Git", fmt.Sprintf("WithGit(%T)", g))
	}
}

// WithLocalRepositories accepts file:// targets (default: refused). A
// local repository is read with the watcher's own rights, so a tenant who
// may name a target could read any repository on the machine, including
// the watcher's mirrors of other tenants' remotes: allow it only in tests
// and single-user tools.
func WithLocalRepositories() Option { return func(o *options) { o.localRepos = true } }

// WithKeptTrees bounds the trees that sinks keep after Deliver returned
// (Change.FS and Change.Root), per mirror (default
// [mirror.DefaultMaxKept], 64; negative: no bound). A tree a sink keeps
// stays readable through fetches and repacks, and keeps on disk the packs
// a repack replaced that it reads; the bound is what makes that disk
// finite. Once a garbage collection found more than n of a mirror's trees
// handed to sinks still referenced, the oldest are released, at the next
// delivery or fetch: a read of one fails with an error wrapping
// [mirror.ErrReleased], and the packs only they read go at the next
// fetch. A sink that keeps a tree for longer (to serve it) keeps a copy
// (sink/dir), or asks for n above the trees it keeps at once. A tree of a
// delivery under way never counts; one that a sink's Deliver left behind
// (in a report, an error, a wrapper's state) does, as kept. Stats.KeptTrees
// and Stats.KeptPackBytes say what they hold.
func WithKeptTrees(n int) Option { return func(o *options) { o.keptTrees = n } }
