package watcher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/mirror"
	"github.com/modwatch/modwatch/internal/backoff"
	"github.com/modwatch/modwatch/watcher/internal/budget"
	"github.com/modwatch/modwatch/watcher/internal/cachedir"
	"github.com/modwatch/modwatch/watcher/internal/fetchgate"
	"github.com/modwatch/modwatch/watcher/internal/hostgate"
	"github.com/modwatch/modwatch/watcher/internal/pool"
)

// Errors of the Watcher's own API, for errors.Is.
var (
	// ErrStarted is returned by Route after Run, and by a second Run.
	ErrStarted = errors.New("watcher: already running")
	// ErrNoRoutes is returned by Run when no route was added.
	ErrNoRoutes = errors.New("watcher: no routes")
	// ErrInvalidOptions is returned by Run for options that contradict
	// each other (the resync set twice); the error names them.
	ErrInvalidOptions = errors.New("watcher: invalid options")
	// ErrCacheDirInUse is returned by Run when another watcher, in this
	// process or another, holds the cache directory.
	ErrCacheDirInUse = cachedir.ErrInUse
)

// Watcher polls the remotes of all its routes' targets and delivers changes
// to their sinks. Create it with [New], add routes with [Watcher.Route],
// then call [Watcher.Run] once.
type Watcher struct {
	*env                  // what its remotes and deliverers share
	changed chan struct{} // a source updated its set: reconcile

	mu         sync.Mutex
	routes     []*route
	started    bool
	group      *errgroup.Group
	remotes    map[string]*remote     // by remote key
	byURL      map[string][]*remote   // w.remotes by URL key, for hints
	remotesGen chan struct{}          // closed and replaced when remotes change
	deliverers map[sinkKey]*deliverer // by route, target and sink
	removing   map[sinkKey]*deliverer // deliverers told to remove or to retire, until done
	opening    map[string]bool        // the mirror directories applyRemotes opens outside mu
	cache      *cachedir.Dir          // while running
	unowned    int                    // targets another replica polls (WithShard)
	removals   *budget.Budget         // the deletion budget: the removals it holds
	// resweep: a target that was not watched left its set; the Inventory
	// sinks are swept again for it (it has no deliverer to be told).
	resweep bool
}

type route struct {
	idx     int
	source  Source
	sinks   []namedSink
	targets []Target          // the source's last valid set; guarded by Watcher.mu
	urlKeys map[string]string // the Endpoint.Key of each of its targets' URLs; guarded by Watcher.mu
	invalid map[string]string // target ID → why it is invalid; guarded by Watcher.mu
	synced  bool              // the source has given a set; guarded by Watcher.mu
	noSet   error             // why the source cannot give its set now (NoSet); guarded by Watcher.mu
	// left is the Suspend of each target that left the set, as the last
	// set that named it had it, until its deliverers are told: sets can
	// come faster than they are bound, and a target resumed then removed
	// left its set resumed. Guarded by Watcher.mu.
	left map[string]bool
}

type namedSink struct {
	name string
	sink Sink
	// every: the sink takes every new commit (see EveryCommit).
	every bool
}

// New returns a Watcher configured by opts.
func New(opts ...Option) *Watcher {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	w := &Watcher{
		env:        newEnv(o),
		changed:    make(chan struct{}, 1),
		remotes:    map[string]*remote{},
		remotesGen: make(chan struct{}),
		deliverers: map[sinkKey]*deliverer{},
		removing:   map[sinkKey]*deliverer{},
		removals:   budget.New(o.removals.share, o.removals.confirm),
		opening:    map[string]bool{},
	}
	w.trigger, w.ended = w.Trigger, w.removed
	return w
}

// Route sends the targets of src to sinks. Many routes share the watcher's
// pollers, so routes watching the same repository cost one poll. Route must
// be called before Run. A sink's name keys its checkpoints: a route's only
// sink may have none ([DefaultSinkName] is its name); several sinks are
// named apart ([Namer], [Named]), so that no name depends on their order.
func (w *Watcher) Route(src Source, sinks ...Sink) error {
	if src == nil || len(sinks) == 0 {
		return errors.New("watcher: a route needs a source and at least one sink")
	}
	// The names are the program's code (Name, Unwrap): asked before w.mu
	// is taken, so that a sink that reads the watcher cannot deadlock it.
	named, err := routeSinks(sinks)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return ErrStarted
	}
	if err != nil {
		return err
	}
	w.routes = append(w.routes, &route{idx: len(w.routes), source: src, sinks: named})
	return nil
}

// routeSinks names the sinks of a route: a route's only sink may have no
// name of its own, several are named apart.
func routeSinks(sinks []Sink) ([]namedSink, error) {
	out := make([]namedSink, 0, len(sinks))
	seen := map[string]bool{}
	for _, s := range sinks {
		if s == nil {
			return nil, errors.New("watcher: nil sink")
		}
		name, err := sinkName(s)
		if _, namer := as[Namer](s); !namer && len(sinks) == 1 {
			name, err = DefaultSinkName, nil // the route's only sink: no order to depend on
		}
		if err != nil {
			return nil, err
		}
		if seen[name] {
			return nil, fmt.Errorf("%w: two sinks are named %q; use watcher.Named", ErrUnnamedSink, name)
		}
		seen[name] = true
		every, _ := as[EveryCommit](s)
		out = append(out, namedSink{name: name, sink: s, every: every != nil && every.EveryCommit()})
	}
	return out, nil
}

// Run watches until ctx is done. It returns nil then, or the error of a
// source that failed (which stops everything). Every goroutine it started
// has stopped when it returns. It holds an exclusive lock on the cache
// directory while it runs: a second watcher on the same directory gets
// [ErrCacheDirInUse].
func (w *Watcher) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return ErrStarted
	}
	routes := w.routes
	if err := w.opts.validate(); err != nil {
		w.mu.Unlock()
		return err
	}
	w.started = true
	if len(routes) == 0 {
		w.mu.Unlock()
		return ErrNoRoutes
	}
	cache, err := cachedir.Open(w.opts.cacheDir, ".clone")
	if err != nil {
		w.mu.Unlock()
		return err
	}
	defer cache.Close()
	w.cache = cache
	w.env.subs = &submodules{v: w.env, dir: w.opts.cacheDir, tmp: cache.Tmp}
	// The logger comes with ctx, as in controller-runtime; sources, sinks
	// and observers' Run get it the same way, through ctx.
	w.env.log = loggerOf(ctx, w.opts.noLoggerOut).WithName("watcher")
	g, gctx := errgroup.WithContext(ctx)
	w.group = g
	w.env.deliveries = pool.New(gctx, w.opts.deliverLimit)
	w.env.polls = pool.New(gctx, w.opts.listLimit+w.opts.fetchLimit)
	w.env.fetches = fetchgate.New(w.opts.fetchLimit, w.env.polls)
	w.env.hosts = hostgate.New(w.opts.listLimit, w.env.polls, w.opts.hostBudget)
	defer w.env.hosts.Close()
	w.mu.Unlock()
	// After the group, whose goroutines schedule; polls first, which offer.
	defer w.env.deliveries.Close()
	defer w.env.polls.Close()

	for _, r := range routes {
		goPart(gctx, g, fmt.Sprintf("source of route %d", r.idx), func(ctx context.Context) error {
			ctx = WithNoSetReporter(ctx, func(err error) { w.noSet(r, err) })
			return r.source.Run(ctx, func(ts []Target) { w.update(r, ts) })
		})
	}
	for _, rn := range w.runnables(routes) {
		goPart(gctx, g, fmt.Sprintf("%T", rn), rn.Run)
	}
	if rn, ok := w.opts.shard.(Runnable); ok {
		goPart(gctx, g, "shard", rn.Run)
	}
	g.Go(func() error { return w.reconcileLoop(gctx) })
	g.Go(func() error { return w.gcLoop(gctx) })
	err = g.Wait()
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// loggerOf is ctx's logger. A ctx without one logs nothing, and a program
// that forgot logr.NewContext is told so once, on out (standard error), as
// controller-runtime tells a program that never set its logger; a program
// that wants no logs says so with logr.Discard() in ctx.
func loggerOf(ctx context.Context, out io.Writer) logr.Logger {
	log, err := logr.FromContext(ctx)
	if err != nil {
		fmt.Fprintln(out, "modwatch: the context given to Watcher.Run carries no logger (logr.NewContext), "+
			"so the watcher, its sources and its sinks log nothing; put logr.Discard() in it to say that is meant")
		return logr.Discard()
	}
	return log
}

// goPart runs part in g until ctx ends; an error before then stops the
// watcher, named by what.
func goPart(ctx context.Context, g *errgroup.Group, what string, part func(context.Context) error) {
	g.Go(func() error {
		if err := part(ctx); err != nil && ctx.Err() == nil {
			return fmt.Errorf("watcher: %s: %w", what, err)
		}
		return nil
	})
}

// runnables returns the sinks and observers that are [Runnable], once each.
func (w *Watcher) runnables(routes []*route) []Runnable {
	var out []Runnable
	seen := map[any]bool{}
	add := func(v any) {
		rn, ok := v.(Runnable)
		if s, isSink := v.(Sink); isSink {
			rn, ok = as[Runnable](s)
			v = rn
		}
		if !ok {
			return
		}
		if !reflect.ValueOf(v).Comparable() {
			out = append(out, rn) // cannot be the same as another
			return
		}
		if !seen[v] {
			seen[v] = true
			out = append(out, rn)
		}
	}
	for _, r := range routes {
		for _, s := range r.sinks {
			add(s.sink)
		}
	}
	for _, o := range w.opts.observers {
		add(o)
	}
	return out
}

// Trigger is a push hint: it makes the watcher poll the remotes of repoURL
// at once (in any URL form; see [gitutil.NormalizeURL]). Hints that arrive
// while a poll runs are coalesced into one more poll. It reports whether any
// watched remote matched.
func (w *Watcher) Trigger(repoURL string) bool {
	key, err := gitutil.NormalizeURL(repoURL)
	if err != nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range w.byURL[key] {
		r.hint()
	}
	return len(w.byURL[key]) > 0
}

// Remotes returns the repositories being polled (one URL per remote, with
// no credentials) and a channel that is closed when that set next changes.
// Push-hint subscriptions use it to subscribe to exactly what is watched.
func (w *Watcher) Remotes() (urls []string, changed <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	seen := map[string]bool{}
	for _, r := range w.remotes {
		if !seen[r.urlKey] {
			seen[r.urlKey] = true
			urls = append(urls, gitutil.StripCredentials(r.url))
		}
	}
	sort.Strings(urls)
	return urls, w.remotesGen
}

// Stats is a snapshot of what a watcher is doing.
type Stats struct {
	// Targets counts the valid targets of all routes; Remotes the
	// repositories polled for them.
	Targets, Remotes int
	// Retrying counts deliveries waiting to be retried after a failure.
	Retrying int
	// Synced reports whether every route's source has given its set at
	// least once.
	Synced bool
	// Invalid counts the targets the sources gave that failed validation
	// (they are not watched); Failing the valid targets whose last poll
	// could not bring them to a commit (credentials, remote, revision or
	// mirror). A readiness check wants Synced with both at zero, or says
	// which targets are not watched.
	Invalid, Failing int
	// Abandoned counts sink calls that ignored their ctx past the delivery
	// timeout and its grace (see [Timeouts.SinkGrace]) and have not returned
	// yet: each holds a goroutine the watcher no longer waits for.
	Abandoned int
	// Unowned counts the targets (of Targets) on remotes that another
	// replica polls (see [WithShard]).
	Unowned int
	// NoSet counts the routes whose source said it cannot give its set now
	// ([NoSet]) and has not given one since: their last sets stay.
	NoSet int
	// RemovalsHeld counts the targets whose removal the deletion budget
	// holds now ([WithRemovalBudget]).
	RemovalsHeld int
	// KeptTrees counts the trees that sinks kept (Change.FS, Change.Root):
	// their delivery returned, a garbage collection since found them still
	// referenced, and they are not released (see [WithKeptTrees]).
	// KeptPackBytes is the size of the packs that repacks replaced and that
	// stay on disk because a tree handed out may read them. Both are of the
	// mirrors that say (gitutil's).
	KeptTrees     int
	KeptPackBytes int64
}

// Stats returns a snapshot of what the watcher is doing; it is cheap and
// safe to call at any time (for metrics and health checks).
func (w *Watcher) Stats() Stats {
	w.mu.Lock()
	st := Stats{Remotes: len(w.remotes), Retrying: int(w.retrying.Load()), Abandoned: int(w.abandoned.Load()), Synced: len(w.routes) > 0, Unowned: w.unowned}
	for _, r := range w.routes {
		st.Targets += len(r.targets)
		st.Invalid += len(r.invalid)
		st.Synced = st.Synced && r.synced
		if r.noSet != nil {
			st.NoSet++
		}
	}
	st.Failing = w.health.Count()
	st.RemovalsHeld = w.removals.Held()
	mirrors := make([]Mirror, 0, len(w.remotes))
	for _, r := range w.remotes {
		mirrors = append(mirrors, r.mirror)
	}
	subs := w.subs
	w.mu.Unlock()
	// A mirror may be the program's (WithGit): asked what it keeps without
	// w.mu, so that one that reads the watcher cannot deadlock it.
	for _, m := range mirrors {
		st.addKept(m)
	}
	subs.kept(&st)
	return st
}

// update takes a source's new set: valid targets replace the route's set,
// invalid ones are reported and left out. Credentials in a target's URL
// become its Auth here, so that no later use of the URL carries them.
//
// The set is kept as the source gave it while every target in it is valid
// and admitted unchanged (the common case): a target costs the watcher no
// copy of its own, which is most of what a target another replica polls
// costs (see [WithShard]). Otherwise the valid targets are copied.
func (w *Watcher) update(r *route, ts []Target) {
	valid := slices.Clip(ts) // until a target is left out or changed
	copied := false
	ids := make(map[string]bool, len(ts))
	invalid := map[string]string{}
	urlKeys := map[string]string{}
	var events []Event
	for i, given := range ts {
		t, ep, err := w.admit(given)
		if err == nil && ids[t.ID] {
			err = fmt.Errorf("%w %s: duplicate id in one source's set", ErrInvalidTarget, t.ID)
		}
		if !copied && (err != nil || !sameAdmitted(t, given)) {
			valid, copied = append(make([]Target, 0, len(ts)), ts[:i]...), true
		}
		if err != nil {
			invalid[t.ID] = err.Error()
			events = append(events, Event{Type: EventInvalidTarget, Target: &t, Remote: gitutil.RedactURL(t.URL), Err: err})
			continue
		}
		ids[t.ID] = true
		if _, ok := urlKeys[t.URL]; !ok {
			urlKeys[t.URL] = ep.Key()
		}
		if copied {
			valid = append(valid, t)
		}
	}
	before := w.takeSet(r, valid, ids, invalid, urlKeys)
	for _, e := range events {
		if before[e.Target.ID] != e.Err.Error() {
			w.log.Error(e.Err, "invalid target, not watched", "target", e.Target.ID, "remote", e.Remote)
		}
		w.emit(e)
	}
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// noteLeft records the Suspend of each target of the route's previous set
// that the new one (ids) leaves out, and forgets it for a target named
// again or with no deliverer to tell (none bound, or told already); the
// caller holds w.mu.
func (w *Watcher) noteLeft(r *route, previous []Target, ids map[string]bool) {
	for _, t := range previous {
		if !ids[t.ID] {
			if r.left == nil {
				r.left = map[string]bool{}
			}
			r.left[t.ID] = t.Suspend
		}
	}
	if len(r.left) == 0 {
		return
	}
	bound := map[string]bool{}
	for k := range w.deliverers {
		if _, ok := r.left[k.id]; ok && k.route == int32(r.idx) {
			bound[k.id] = true
		}
	}
	for id := range r.left {
		if ids[id] || !bound[id] {
			delete(r.left, id)
		}
	}
}

// leftSuspended reports whether the target of k left its set suspended:
// as the latest set that named it said, else as its deliverer has it.
func (w *Watcher) leftSuspended(k sinkKey, d *deliverer) bool {
	if int(k.route) < len(w.routes) {
		if s, ok := w.routes[k.route].left[k.id]; ok {
			return s
		}
	}
	return d.suspended()
}

// admit checks a target from a source and puts it in the form the watcher
// keeps: its URL without credentials (those become its Auth) and its path
// cleaned. It returns the URL parsed, once. The target returned never
// carries a secret in its URL, even with an error.
func (w *Watcher) admit(given Target) (Target, gitutil.Endpoint, error) {
	t := given
	if nw, ok := t.Payload.(notWatched); ok {
		return t, gitutil.Endpoint{}, fmt.Errorf("%w %s: %w", ErrInvalidTarget, t.ID, nw.err)
	}
	bare, auth, mergeErr := gitutil.MergeURLCredentials(t.URL, t.Auth)
	if mergeErr != nil {
		bare = gitutil.StripCredentials(t.URL)
	}
	t.URL = bare
	ep, err := t.validate()
	if err != nil {
		return t, ep, err
	}
	if mergeErr != nil {
		return t, ep, fmt.Errorf("%w %s: url: %w", ErrInvalidTarget, t.ID, mergeErr)
	}
	t.Auth = auth
	if ep.Scheme == "file" && !w.opts.localRepos {
		return t, ep, fmt.Errorf("%w %s: url: local repositories are refused (see WithLocalRepositories)", ErrInvalidTarget, t.ID)
	}
	t.Path, _ = mirror.CleanPath(t.Path)
	for i, p := range t.Paths {
		if clean, _ := mirror.CleanPath(p); clean != p {
			if &t.Paths[0] == &given.Paths[0] {
				t.Paths = slices.Clone(t.Paths) // the source's slice stays as it gave it
			}
			t.Paths[i] = clean
		}
	}
	return t, ep, nil
}

// takeSet makes valid (ids), invalid and urlKeys the route's set, and
// returns the targets it had not watched before. A target not watched
// that is gone sweeps again (what sinks hold for it goes too); one watched
// again is failing until polled, which it is at once (its remote may not
// have noticed it was gone), and then it has recovered.
func (w *Watcher) takeSet(r *route, valid []Target, ids map[string]bool, invalid, urlKeys map[string]string) (before map[string]string) {
	w.mu.Lock()
	before = r.invalid
	for id := range before {
		if _, still := invalid[id]; !still && !ids[id] {
			w.resweep = true
		}
	}
	w.noteLeft(r, r.targets, ids)
	r.targets, r.urlKeys, r.invalid, r.synced, r.noSet = valid, urlKeys, invalid, true, nil
	var polls []*remote
	for i := 0; len(before) > 0 && i < len(valid); i++ { // none: the common case, 100,000 targets
		if t := valid[i]; before[t.ID] != "" {
			w.health.Fail(t.ID, string(EventInvalidTarget))
			polls = append(polls, w.byURL[urlKeys[t.URL]]...)
		}
	}
	w.mu.Unlock()
	for _, rm := range polls {
		rm.poke()
	}
	return before
}

// sameAdmitted reports whether admit left t as the source gave it.
func sameAdmitted(t, given Target) bool {
	return t.URL == given.URL && t.Auth == given.Auth && t.Path == given.Path &&
		(len(t.Paths) == 0 || &t.Paths[0] == &given.Paths[0])
}

func (w *Watcher) reconcileLoop(ctx context.Context) error {
	resync := resyncer{ask: w.opts.resyncFunc}
	resync.next()
	var retry *time.Timer
	pruned := false // what Inventory sinks hold for targets no source wants
	defer func() {
		resync.stop()
		if retry != nil {
			retry.Stop()
		}
	}()
	for {
		var retryC <-chan time.Time
		if retry != nil {
			retryC = retry.C
		}
		var shardC <-chan struct{}
		if w.opts.shard != nil {
			shardC = w.opts.shard.Changed()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-w.changed:
		case <-shardC:
		case <-retryC:
		case <-resync.c:
			if resync.due {
				w.resyncAll()
			}
			resync.next()
			continue
		}
		if retry != nil {
			retry.Stop()
			retry = nil
		}
		if !w.reconcile(ctx) {
			// Some credentials or mirrors could not be had: try again.
			retry = time.NewTimer(backoff.Jitter(w.opts.credentialsRetry, w.opts.jitter))
		}
		if w.takeResweep() || !pruned {
			pruned = w.pruneOrphans(ctx)
		}

	}
}

// takeResweep reports whether a target that was not watched has left its
// set since it was last asked (see resweep).
func (w *Watcher) takeResweep() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	again := w.resweep
	w.resweep = false
	return again
}

// resyncer times the resyncs: what ask (WithResync) says at each; none
// now: ask again a minute later; no ask: none.
type resyncer struct {
	ask   func() time.Duration
	timer *time.Timer
	c     <-chan time.Time // nil: no resync
	due   bool             // the timer is a resync, not a look at ask again
}

// next arms the timer to the next resync.
func (r *resyncer) next() {
	var d time.Duration
	if r.ask != nil {
		d = r.ask()
	}
	switch {
	case d > 0:
		r.timer, r.due = time.NewTimer(d), true
	case r.ask != nil:
		r.timer, r.due = time.NewTimer(time.Minute), false
	default:
		r.timer, r.c = nil, nil
		return
	}
	r.c = r.timer.C
}

func (r *resyncer) stop() {
	if r.timer != nil {
		r.timer.Stop()
	}
}

// boundTarget is a target of a route, with the deliverers of the route's sinks.
type boundTarget struct {
	key    targetKey
	target Target
	rev    gitutil.Revision
	sinks  []*deliverer
	route  *route // until its deliverers are bound
	// one holds the deliverer of a route of one sink, the usual, which
	// sinks then slices: no array of its own for each target.
	one [1]*deliverer
}

type remoteSpec struct {
	url     string
	urlKey  string
	auth    *gitutil.Auth
	targets map[targetKey]*boundTarget
}

// reconcile brings pollers and deliverers in line with the routes' target
// sets. It reports false when something must be retried.
func (w *Watcher) reconcile(ctx context.Context) bool {
	p := w.remoteSpecs(ctx)
	for _, e := range w.bindDeliverers(p.owned) {
		w.log.Error(e.Err, "removals held")
		w.emit(e)
	}
	w.mu.Lock()
	w.unowned = len(p.others)
	w.mu.Unlock()
	failed := w.applyRemotes(ctx, p.specs)
	watched := make(map[string]bool, len(p.owned))
	for _, b := range p.owned {
		if !p.others[b.target.ID] {
			watched[b.target.ID] = true // the failures of the others are theirs to report
		}
	}
	w.health.Keep(watched)
	for _, e := range failed {
		w.targetFailed(e)
	}
	return p.credsOK && len(failed) == 0
}

// targetKey names a target among all the watcher's: its ID and the number
// of its route. A struct, not a string of both, so that a bound target
// keeps no string but its ID; the route's number is an int32, so that the
// key, and sinkKey, take three words, not four.
type targetKey struct {
	id    string
	route int32
}

// keyOf is the key of the target id of the route numbered route.
func keyOf(route int, id string) targetKey { return targetKey{id, int32(route)} }

// compare orders keys by route, then ID.
func (k targetKey) compare(o targetKey) int {
	return cmp.Or(cmp.Compare(k.route, o.route), strings.Compare(k.id, o.id))
}

// sink is the key of the deliverer of k for the sink numbered i of its
// route.
func (k targetKey) sink(i int) sinkKey { return sinkKey{k.id, k.route, int32(i)} }

// sinkKey names a deliverer among all the watcher's: a target and a sink
// of its route.
type sinkKey struct {
	id          string
	route, sink int32
}

// target is the key of the deliverer's target.
func (k sinkKey) target() targetKey { return targetKey{k.id, k.route} }

// bindOwned gives each target this replica polls its deliverers, starting
// those that are new (fresh: not in the deletion budget's base), and
// returns the keys of all; the caller holds w.mu.
func (w *Watcher) bindOwned(owned []*boundTarget) (wanted, fresh map[sinkKey]bool) {
	wanted = map[sinkKey]bool{}
	for _, b := range owned {
		if len(b.route.sinks) == 1 {
			b.sinks = b.one[:0]
		}
		for i, s := range b.route.sinks {
			dkey := b.key.sink(i)
			wanted[dkey] = true
			d, ok := w.deliverers[dkey]
			if !ok {
				prev := w.removing[dkey]
				if prev != nil {
					prev.unremove() // named again before its removal succeeded
				}
				d = newDeliverer(w.env, dkey, &b.target, s, prev)
				w.deliverers[dkey] = d
				w.env.deliveries.Start(d)
				if fresh == nil {
					fresh = map[sinkKey]bool{}
				}
				fresh[dkey] = true
			} else {
				d.seen(&b.target) // suspended or resumed since: it decides what is done if it goes
			}
			b.sinks = append(b.sinks, d)
		}
		b.route = nil
	}
	return wanted, fresh
}

// bindDeliverers gives each target this replica polls (owned) its
// deliverers, one per sink, starting those that are new; it tells those
// of targets no source names any more to remove, and those of the targets
// another replica polls now, or that their source still names but that
// are invalid now, to retire: they end without a word to the sink (the
// target is not gone), so that a target costs a replica that does not poll
// it nothing but its place in the route.
func (w *Watcher) bindDeliverers(owned []*boundTarget) []Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	wanted, fresh := w.bindOwned(owned)
	var present map[targetKey]bool // every target's key, made once a deliverer ends
	var gone map[int32][]sinkKey   // by route: the deliverers of targets no source names
	for dkey, d := range w.deliverers {
		if wanted[dkey] {
			continue
		}
		if present == nil {
			present = map[targetKey]bool{}
			for _, r := range w.routes {
				for _, t := range r.targets {
					present[keyOf(r.idx, t.ID)] = true
				}
				for id := range r.invalid {
					present[keyOf(r.idx, id)] = true // named, though not watched: wanted
				}
			}
		}
		if present[dkey.target()] {
			delete(w.deliverers, dkey)
			w.removing[dkey] = d // the next of its key waits for it
			d.retire()           // another replica's now, or named but invalid: wanted still
			continue
		}
		if gone == nil {
			gone = map[int32][]sinkKey{}
		}
		gone[dkey.route] = append(gone[dkey.route], dkey)
	}
	return w.removeGone(gone, fresh)
}

// removeGone tells the deliverers of targets their route's source no longer
// names to remove, route by route, within the deletion budget (the share
// is of the targets the route's deliverers served before this pass: gone
// ones included, those made in it, fresh, not); the caller holds w.mu. It
// returns the events of decisions held.
func (w *Watcher) removeGone(gone map[int32][]sinkKey, fresh map[sinkKey]bool) []Event {
	var events []Event
	seen := map[string]bool{}
	var all map[int32]map[string]bool
	if len(gone) > 0 {
		all = map[int32]map[string]bool{}
		for dkey := range w.deliverers {
			if gone[dkey.route] != nil && !fresh[dkey] {
				if all[dkey.route] == nil {
					all[dkey.route] = map[string]bool{}
				}
				all[dkey.route][dkey.id] = true
			}
		}
	}
	for route, dkeys := range gone {
		ids := map[string]bool{}
		var removing []sinkKey
		for _, k := range dkeys {
			d := w.deliverers[k]
			suspended := w.leftSuspended(k, d)
			d.leftAs(suspended)
			if suspended {
				// Forgotten, not removed (see Forgetter): nothing to hold.
				delete(w.deliverers, k)
				w.removing[k] = d
				d.remove()
				continue
			}
			ids[k.id] = true
			removing = append(removing, k)
		}
		dkeys = removing
		key := fmt.Sprintf("route %d", route)
		seen[key] = true
		ok, e := w.allowRemoval(key, slices.Sorted(maps.Keys(ids)), len(all[route]), w.routeReady(route))
		if e != nil {
			events = append(events, *e)
		}
		if !ok {
			continue // held: the deliverers stay as they are
		}
		for _, dkey := range dkeys {
			d := w.deliverers[dkey]
			delete(w.deliverers, dkey)
			w.removing[dkey] = d // the next of its key waits for it
			d.remove()
		}
	}
	w.removals.Forget(seen, "route ")
	return events
}

// routeReady reports whether the source of the route numbered idx has a
// set now (no NoSet since its last): a held removal is carried out only
// then. The caller holds w.mu.
func (w *Watcher) routeReady(idx int32) bool {
	for _, r := range w.routes {
		if int32(r.idx) == idx {
			return r.noSet == nil
		}
	}
	return false
}

// specPass is what one reconcile makes of the routes' targets: the remotes
// this replica polls (all of them without a shard) with their targets
// bound (owned), and the IDs of the targets another replica polls.
type specPass struct {
	w       *Watcher
	specs   map[string]*remoteSpec
	owned   []*boundTarget
	others  map[string]bool
	owns    map[string]bool // the shard's answer per remote key
	credsOK bool
}

// remoteSpecs groups the targets of the routes by remote: URL and
// credential identity, so that a target never reads through a mirror
// fetched with another's credentials. The shard is asked before a target's
// boundTarget is made: a target another replica polls costs this one no
// allocation that outlives the pass. A target whose credentials cannot be
// had now stays on the remote it was on (see stay); credsOK is false then.
func (w *Watcher) remoteSpecs(ctx context.Context) *specPass {
	p := &specPass{w: w, specs: map[string]*remoteSpec{}, others: map[string]bool{}, owns: map[string]bool{}, credsOK: true}
	type found struct {
		auth        *gitutil.Auth
		err         error
		urlKey, key string // key is urlKey#identity
	}
	resolved := map[string]found{} // one resolver call per URL per pass
	type routeSet struct {
		r       *route
		targets []Target          // the source's: read, never changed (update replaces it)
		urlKeys map[string]string // the same
	}
	w.mu.Lock()
	sets := make([]routeSet, len(w.routes))
	for i, r := range w.routes {
		sets[i] = routeSet{r, r.targets, r.urlKeys}
	}
	w.mu.Unlock()
	for _, set := range sets {
		r := set.r
		for i := range set.targets {
			t := &set.targets[i]
			f, seen := resolved[t.URL]
			if !seen || t.Auth != nil {
				f = found{}
				f.auth, f.err = w.credentials(ctx, *t)
				if f.err == nil {
					f.urlKey = set.urlKeys[t.URL]
					f.key = f.urlKey + "#" + f.auth.Identity()
				}
				if t.Auth == nil {
					resolved[t.URL] = f
				}
			}
			switch {
			case f.err != nil:
				p.credsOK = false
				failed := *t
				w.targetFailed(Event{Type: EventTargetFailed, Target: &failed, Remote: gitutil.RedactURL(t.URL),
					Err: fmt.Errorf("watcher: credentials for %s: %w", gitutil.RedactURL(t.URL), f.err)})
				p.stay(r, t)
			case !p.ownsKey(f.key):
				p.others[t.ID] = true // another replica's: its poller stops here
			default:
				p.add(f.key, t.URL, f.urlKey, f.auth, p.bind(r, t))
			}
		}
	}
	return p
}

func (p *specPass) ownsKey(key string) bool {
	o, asked := p.owns[key]
	if !asked {
		o = p.w.opts.shard == nil || p.w.opts.shard.Owns(key)
		p.owns[key] = o
	}
	return o
}

// bind makes the boundTarget of a target this replica polls.
func (p *specPass) bind(r *route, t *Target) *boundTarget {
	b := &boundTarget{key: keyOf(r.idx, t.ID), target: *t, route: r}
	b.rev, _ = gitutil.ParseRevision(t.Revision) // validated in update
	p.owned = append(p.owned, b)
	return b
}

func (p *specPass) add(key, url, urlKey string, auth *gitutil.Auth, b *boundTarget) {
	spec := p.specs[key]
	if spec == nil {
		spec = &remoteSpec{url: url, urlKey: urlKey, auth: auth, targets: map[targetKey]*boundTarget{}}
		p.specs[key] = spec
	}
	spec.targets[b.key] = b
}

// stay keeps a target whose credentials cannot be had now on the remotes
// it was on, with the credentials they have, where this replica still
// polls them. On none of them, it is another replica's when one of them
// is, and this replica's otherwise: bound, on no remote.
func (p *specPass) stay(r *route, t *Target) {
	bkey := keyOf(r.idx, t.ID)
	type was struct {
		key, url, urlKey string
		auth             *gitutil.Auth
	}
	var on []was
	p.w.mu.Lock()
	for key, rm := range p.w.remotes {
		if rm.has(bkey) {
			on = append(on, was{key, rm.url, rm.urlKey, rm.currentAuth()})
		}
	}
	p.w.mu.Unlock()
	var b *boundTarget
	theirs := false
	for _, o := range on {
		if !p.ownsKey(o.key) {
			theirs = true
			continue
		}
		if b == nil {
			b = p.bind(r, t)
		}
		p.add(o.key, o.url, o.urlKey, o.auth, b)
	}
	switch {
	case b != nil:
	case theirs:
		p.others[t.ID] = true
	default:
		p.bind(r, t)
	}
}

// applyRemotes stops the remotes no spec names, hands the others their
// targets and starts the new ones. The new ones' mirrors are opened
// outside w.mu, as many at a time as the watcher lists (a takeover opens
// hundreds), and each remote starts polling once its mirror is open. It
// returns the failures of the targets whose mirror could not be opened,
// to report once w.mu is released. Only reconcile calls it, one call at
// a time.
func (w *Watcher) applyRemotes(ctx context.Context, specs map[string]*remoteSpec) []Event {
	w.mu.Lock()
	changed := false
	for key, r := range w.remotes {
		if _, keep := specs[key]; !keep {
			r.stop()
			w.env.forget(r, nil)
			delete(w.remotes, key)
			changed = true
		}
	}
	var fresh []string
	for key, spec := range specs {
		if r, ok := w.remotes[key]; ok {
			w.env.forget(r, spec.targets)
			r.setTargets(spec.auth, spec.targets)
			continue
		}
		fresh = append(fresh, key)
		w.opening[cachedir.MirrorName(key)] = true // not collected while it opens (see collectMirrors)
	}
	w.mu.Unlock()

	started, failed := w.startRemotes(ctx, fresh, specs)

	w.mu.Lock()
	defer w.mu.Unlock()
	if changed || started > 0 {
		close(w.remotesGen)
		w.remotesGen = make(chan struct{})
		w.byURL = make(map[string][]*remote, len(w.remotes))
		for _, r := range w.remotes {
			w.byURL[r.urlKey] = append(w.byURL[r.urlKey], r)
		}
	}
	return failed
}

// startRemotes opens the mirrors of the remotes named fresh, outside w.mu
// and as many at a time as the watcher lists, and starts each remote once
// its own is open. It returns how many started, and the failures of the
// targets whose mirror could not be opened.
func (w *Watcher) startRemotes(ctx context.Context, fresh []string, specs map[string]*remoteSpec) (started int, failed []Event) {
	var g errgroup.Group // started and failed are guarded by w.mu
	g.SetLimit(w.opts.listLimit)
	if read := w.env.startBatch(fresh, specs); read != nil {
		// The checkpoints read together while the mirrors open and the
		// first polls list.
		g.Go(func() error { read(ctx); return nil })
	}
	for _, key := range fresh {
		spec := specs[key]
		g.Go(func() error {
			r, err := w.openRemote(key, spec)
			w.mu.Lock()
			defer w.mu.Unlock()
			delete(w.opening, cachedir.MirrorName(key))
			if err != nil {
				w.env.drop(key, specs)
				for _, b := range spec.targets {
					t := b.target
					failed = append(failed, Event{Type: EventTargetFailed, Target: &t, Remote: gitutil.RedactURL(t.URL), Err: err})
				}
				return nil
			}
			w.remotes[key] = r
			if w.byURL == nil {
				w.byURL = map[string][]*remote{}
			}
			w.byURL[r.urlKey] = append(w.byURL[r.urlKey], r) // triggers reach it before applyRemotes rebuilds the map
			r.start(ctx)
			started++
			return nil
		})
	}
	_ = g.Wait() // the opens report their failures in failed
	return started, failed
}

// openRemote opens the mirror of a remote, in the cache directory under a
// name made from its key.
func (w *Watcher) openRemote(key string, spec *remoteSpec) (*remote, error) {
	dir := filepath.Join(w.opts.cacheDir, cachedir.MirrorName(key))
	var r *remote // set before anyone reads the mirror
	m, err := w.opts.git.OpenMirror(dir, spec.url, mirror.Options{
		TempDir: w.cache.Tmp,
		MaxKept: w.opts.keptTrees,
		// A damaged store found by any read is rebuilt by a poll now.
		OnDamage: func(error) { r.poke() },
	})
	if err != nil {
		return nil, err
	}
	r = newRemote(w.env, key, dir, spec, m)
	return r, nil
}

func (w *Watcher) credentials(ctx context.Context, t Target) (*gitutil.Auth, error) {
	if t.Auth != nil || w.opts.creds == nil {
		return t.Auth, nil
	}
	ctx, cancel := context.WithTimeout(ctx, w.opts.listTimeout)
	defer cancel()
	return w.opts.creds.Resolve(ctx, t.URL)
}

// removed is called by a deliverer when it has finished.
func (w *Watcher) removed(d *deliverer) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.removing[d.name] == d {
		delete(w.removing, d.name)
	}
}

func (w *Watcher) resyncAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, d := range w.deliverers {
		d.requestResync()
	}
}

// sameTargets reports whether two bound targets watch the same thing
// through the same deliverers.
func sameTargets(a, b *boundTarget) bool {
	return reflect.DeepEqual(a.target, b.target) && reflect.DeepEqual(a.sinks, b.sinks)
}

// sameButInterval reports whether two bound targets differ in their
// interval only.
func sameButInterval(a, b *boundTarget) bool {
	t := b.target
	t.Interval = a.target.Interval
	return reflect.DeepEqual(a.target, t) && reflect.DeepEqual(a.sinks, b.sinks)
}
