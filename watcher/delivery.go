package watcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/mirror"
	"github.com/modwatch/modwatch/internal/backoff"
	"github.com/modwatch/modwatch/watcher/internal/handout"
	"github.com/modwatch/modwatch/watcher/internal/lazyfs"
	"github.com/modwatch/modwatch/watcher/internal/pool"
	"github.com/modwatch/modwatch/watcher/internal/reads"
)

// commitOffer is what a poller wants a sink to have.
type commitOffer struct {
	// target is shared with the bound target it was offered for (and with
	// the deliverers that keep it): never written to.
	target *Target
	ref    string
	commit gitutil.Hash
	tree   gitutil.Hash
	// fingerprint is the target's (see Target.fingerprint), made once for
	// all its sinks.
	fingerprint string
	mirror      MirrorReader
	remote      string    // redacted URL
	seen        time.Time // when the poller first saw commit for the target
	// live is the poller's context: once it is done (the remote went to
	// another replica, or another remote took the target), what it offered
	// is not delivered, and a delivery of it in flight is cancelled.
	live context.Context
	// question is set when the mirror may lack commit (tree is unknown):
	// the deliverer only answers whether its checkpoint holds it.
	question *question
	// verified are the signatures checked for commit (Change.Verified),
	// nil for a target without Verify: a pointer, so that an offer, one
	// for each target, stays in its size class.
	verified *[]Signature
}

// errHandedOff ends a delivery whose poller stopped: the target is another
// poller's now (see commitOffer.live).
var errHandedOff = errors.New("watcher: the target's remote is polled elsewhere now")

// errUnfetched ends a delivery of a commit offered unfetched that the sink
// lacks: the poller fetches it and offers it again.
var errUnfetched = errors.New("watcher: the commit is to be fetched")

// deliverer serializes the deliveries of one target to one sink. It holds at
// most one pending desire: a newer one replaces it (latest wins). It has no
// goroutine of its own: what it is told schedules a step of it on the
// watcher's pool (see pool.Pool), and its steps run one at a time.
type deliverer struct {
	env  *env
	name sinkKey // its key among the watcher's (env.ended is told it ended)
	key  string  // checkpoint key: target ID and sink name
	sink namedSink
	prev *deliverer // a deliverer of the same key still removing; its steps only

	// Its steps only (one at a time). The booleans sit together, after
	// state's, so that padding does not take the deliverer to a larger size
	// class: there is one for each target and sink.
	state      deliveryState
	unreadable bool // an unreadable checkpoint was reported
	knownHave  bool // known holds a checkpoint
	// known is the checkpoint as this deliverer last read or wrote it, for
	// the deliveries offered by the poller whose context is knownFor (nil:
	// none known). While one poller lives, only this deliverer writes its
	// key: a replica polls the remote and no other. A new poller (the
	// remote was polled elsewhere meanwhile, or the target moved to
	// another remote) reads it again.
	known    Checkpoint
	knownFor context.Context

	pool  *pool.Pool // the watcher's deliveries
	sched pool.Slot

	mu         sync.Mutex
	target     *Target // the target as last seen, for Remove; never written to
	pending    *commitOffer
	resync     bool
	removed    bool
	resumed    bool // no longer suspended: its checkpoint's mark goes
	retired    bool // another replica polls the target: end, as if stopped
	held       bool // the target is suspended: drop what was to be delivered
	ended      bool
	due        int          // the timer of this generation fired
	successors []*deliverer // waiting for it to end
}

func newDeliverer(v *env, name sinkKey, t *Target, s namedSink, prev *deliverer) *deliverer {
	d := &deliverer{env: v, name: name, key: t.ID + "/" + s.name, sink: s, target: t, pool: v.deliveries}
	if prev != nil {
		prev.mu.Lock()
		if !prev.ended {
			d.prev = prev
			prev.successors = append(prev.successors, d)
		}
		prev.mu.Unlock()
	}
	return d
}

// signal schedules a step.
func (d *deliverer) signal() {
	if d.pool != nil {
		d.pool.Schedule(d)
	}
}

// offer makes want the next thing to deliver, replacing any pending one.
// want is shared by the target's sinks and never written to.
func (d *deliverer) offer(want *commitOffer) {
	d.mu.Lock()
	d.pending, d.target, d.held = want, want.target, false
	d.mu.Unlock()
	d.signal()
}

// hold drops what the deliverer was to deliver, a retry too: its target
// is suspended. The next offer (it was resumed) delivers again.
func (d *deliverer) hold() {
	d.mu.Lock()
	d.pending, d.resync, d.held = nil, false, true
	d.mu.Unlock()
	d.signal()
}

func (d *deliverer) requestResync() {
	d.mu.Lock()
	d.resync = true
	d.mu.Unlock()
	d.signal()
}

// seen takes the target as its source gives it now when its suspension
// changed: what the deliverer does if it goes (removed, or forgotten when
// suspended) depends on it.
func (d *deliverer) seen(t *Target) {
	d.mu.Lock()
	changed := d.target.Suspend != t.Suspend
	if changed {
		d.resumed = d.target.Suspend // its checkpoint's mark goes at its next step
		d.target = t
	}
	d.mu.Unlock()
	if changed {
		d.signal()
	}
}

// leftAs sets whether its target left its set suspended, as the latest
// set that named it said: its removal is then a Forget.
func (d *deliverer) leftAs(suspended bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.target.Suspend != suspended {
		t := *d.target
		t.Suspend = suspended
		d.target = &t
	}
}

// suspended reports whether its target was suspended when last seen: its
// removal is then a Forget.
func (d *deliverer) suspended() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.target.Suspend
}

// remove tells the deliverer its target is gone: it calls the sink's
// Remove, forgets the checkpoint and ends.
func (d *deliverer) remove() {
	d.mu.Lock()
	d.removed = true
	d.mu.Unlock()
	d.signal()
}

// unremove tells a deliverer told to remove that its target is named
// again: a removal not yet done is dropped, and it ends as retired does
// (the deliverer of the target named again waits for it).
func (d *deliverer) unremove() {
	d.mu.Lock()
	d.removed, d.retired = false, true
	d.mu.Unlock()
	d.signal()
}

// retire tells the deliverer that another replica polls its target now:
// it drops what it was to deliver, its retry too, and ends after the step
// under way, without calling the sink (the target is not gone).
func (d *deliverer) retire() {
	d.mu.Lock()
	d.retired = true
	d.mu.Unlock()
	d.signal()
}

func (d *deliverer) hasEnded() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ended
}

// Slot, Step and Finish make a deliverer a pool.Task.
func (d *deliverer) Slot() *pool.Slot { return &d.sched }

// Finish ends the deliverer (its retry stopped): the one of its key
// waiting for it may start.
func (d *deliverer) Finish() {
	d.state.stopTimer(d)
	d.mu.Lock()
	d.ended = true
	next := d.successors
	d.successors = nil
	d.mu.Unlock()
	if d.env.ended != nil {
		d.env.ended(d)
	}
	for _, s := range next {
		s.signal()
	}
}

// Step does what the deliverer has to do now: a delivery of the latest it
// was offered (or a resync, or a retry that is due), or an attempt at its
// removal. It reports whether the deliverer has ended.
func (d *deliverer) Step(ctx context.Context) bool {
	if ctx.Err() != nil {
		return false // the pool's close ends it
	}
	if d.prev != nil {
		if !d.prev.hasEnded() {
			return false // it signals when it ends
		}
		d.prev = nil
	}
	st := &d.state
	d.mu.Lock()
	next, rs, rm, retired, held, target, due := d.pending, d.resync, d.removed, d.retired, d.held, d.target, d.due
	resumed := d.resumed
	d.pending, d.resync, d.held, d.resumed = nil, false, false, false
	d.mu.Unlock()
	if resumed && !held {
		d.markSuspended(ctx, *target, false)
	}
	fired := st.timer != nil && due == st.gen // a stale timer's firing is not
	switch {
	case retired && !rm:
		st.stopTimer(d)
		st.want = nil
		return true
	case rm:
		if !st.removing { // what it was delivering, and its retry, are over
			st.stopTimer(d)
			st.want, st.removing, st.attempt = nil, true, 0
		} else if st.timer != nil && !fired {
			return false // waiting to retry the removal
		}
		st.stopTimer(d)
		return d.removeStep(ctx, *target)
	case held:
		st.stopTimer(d)
		st.want, st.resync, st.attempt = nil, false, 0
		d.markSuspended(ctx, *target, true)
		return false
	case next != nil:
		st.want, st.attempt = next, 0
	}
	st.resync = st.resync || rs
	if st.want == nil || (next == nil && !rs && !fired) {
		return false
	}
	st.stopTimer(d)
	st.after(ctx, d, d.deliver(ctx, st.want, st.resync, st.attempt+1))
	return false
}

// deliveryState is what a deliverer carries between steps: the latest
// desire taken, a resync asked for, the failures of this delivery (or
// removal) and the timer of its retry.
type deliveryState struct {
	want     *commitOffer
	attempt  int
	timer    *time.Timer
	gen      int // the timer's generation
	resync   bool
	counted  bool // the timer is a delivery's retry, counted in Stats.Retrying
	removing bool // the target is gone: attempt counts removals
}

// retryIn schedules a step of d after delay.
func (st *deliveryState) retryIn(d *deliverer, delay time.Duration, counted bool) {
	st.stopTimer(d)
	st.gen++
	gen := st.gen
	st.timer = time.AfterFunc(delay, func() {
		d.mu.Lock()
		d.due = gen
		d.mu.Unlock()
		d.signal()
	})
	st.counted = counted
	if counted {
		d.env.retrying.Add(1)
	}
}

func (st *deliveryState) stopTimer(d *deliverer) {
	if st.timer != nil {
		st.timer.Stop()
		st.timer = nil
		if st.counted {
			d.env.retrying.Add(-1)
		}
	}
}

// after takes the outcome of a delivery.
func (st *deliveryState) after(ctx context.Context, d *deliverer, err error) {
	switch {
	case err == nil:
		st.resync, st.attempt = false, 0
	case ctx.Err() != nil:
	case errors.Is(err, errHandedOff):
		// Its new poller offers it again, here or on another replica.
		st.want, st.resync, st.attempt = nil, false, 0
	case errors.Is(err, errUnfetched):
		// Its poller offers it again once fetched; a resync asked for
		// is delivered then.
		st.want, st.attempt = nil, 0
	case IsPermanent(err):
		// Wait for the next commit or resync; do not retry this one.
		st.resync, st.attempt = false, 0
	default:
		st.attempt++
		st.retryIn(d, backoff.Delay(st.attempt, d.env.opts.retryMin, d.env.opts.retryMax), true)
	}
}

// deliver hands want to the sink unless its checkpoint says it has it.
func (d *deliverer) deliver(ctx context.Context, want *commitOffer, resync bool, attempt int) error {
	t := *want.target
	if want.live != nil && want.live.Err() != nil {
		return errHandedOff
	}
	commit, fp := want.commit, want.fingerprint
	ev := Event{Target: &t, Sink: d.sink.name, Remote: want.remote, Ref: want.ref, Commit: commit, Attempt: attempt, Seen: want.seen}
	cp, have, err := d.checkpoint(ctx, want.live, t.ID)
	if err != nil {
		return d.fail(ctx, ev, nil, err)
	}
	if q := want.question; q != nil {
		has := holds(cp, have, commit, fp, resync)
		q.answer(has)
		if !has {
			return errUnfetched
		}
		ev.Type = EventUpToDate // the sink has it, unfetched (a start on a new cache)
		d.env.emit(ev)
		return nil
	}
	// What the last delivery read outside the path counts as the path.
	tree, err := readsTree(ctx, want, cp.Reads)
	if err != nil {
		return d.fail(ctx, ev, nil, err)
	}
	dec := decide(cp, have, commit, tree, fp, resync)
	if dec.action == record && d.sink.every {
		dec = decision{action: deliver, reason: ReasonNewCommit, from: cp.Commit}
	}
	switch dec.action {
	case skip:
		if cp.Suspended { // offered, so not suspended now
			d.markSuspended(ctx, t, false)
		}
		ev.Type = EventUpToDate // the sink has it already (a start, an offer again)
		d.env.emit(ev)
		return nil
	case record:
		return d.record(ctx, want.live, ev, cp)
	}
	h, links := &handout.Trees{}, reads.NewLinks(t.Path)
	c, err := d.change(ctx, want, dec, h, links)
	if err != nil {
		return d.fail(ctx, ev, &c, err)
	}
	if len(c.Submodules) > 0 && attempt == 1 {
		d.env.log.Info("submodules are left out of the delivered tree", "target", t.ID, "sink", d.sink.name, "commit", short(commit), "submodules", c.Submodules)
		left := ev
		left.Type, left.Change = EventSubmodulesLeftOut, &c
		d.env.emit(left)
	}
	return d.invoke(ctx, want, ev, c, h, links)
}

// invoke calls the sink with c and, when it succeeds, records the
// checkpoint, with what the sink read outside the path (its report's and
// links' reads), and reports the delivery. c's file systems are closed
// after, unless the sink was abandoned (it may read on), and handed on
// (see handout.Trees) either way.
func (d *deliverer) invoke(ctx context.Context, want *commitOffer, ev Event, c Change, h *handout.Trees, links *reads.Links) error {
	t, commit := *want.target, ev.Commit
	abandoned := false
	defer func() {
		if !abandoned {
			closeAll(c.FS, c.Root)
		}
		h.HandOn(c.FS)
	}()
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if want.live != nil {
		defer context.AfterFunc(want.live, cancel)()
	}
	// The sink logs through ctx's logger, with the target and itself named.
	callCtx = logr.NewContext(callCtx, logr.FromContextOrDiscard(ctx).WithValues("target", t.ID, "sink", d.sink.name))
	var err error
	ev.Result, ev.Duration, err = d.call(callCtx, c)
	abandoned = errors.Is(err, ErrSinkAbandoned)
	if err != nil && want.live != nil && want.live.Err() != nil && ctx.Err() == nil {
		d.env.log.V(1).Info("delivery cancelled: the remote is polled elsewhere now", "target", t.ID, "sink", d.sink.name, "commit", short(commit))
		return errHandedOff
	}
	if err != nil {
		return d.fail(ctx, ev, &c, err)
	}
	read := reads.Of(reportedReads(ev.Result), links.List(), t.Path)
	tree, err := readsTree(ctx, want, read)
	if err != nil {
		return d.fail(ctx, ev, &c, err)
	}
	if err := d.put(ctx, want.live, Checkpoint{Commit: commit, Tree: tree, Target: want.fingerprint, Reads: read, Time: time.Now()}); err != nil {
		// Delivered but not recorded: deliver again rather than lose it.
		return d.fail(ctx, ev, &c, err)
	}
	d.unreadable = false
	ev.Type, ev.Change = EventDelivered, &c
	d.env.emit(ev)
	d.env.log.V(1).Info("delivered", "target", t.ID, "sink", d.sink.name, "commit", short(commit), "reason", c.Reason)
	return nil
}

// checkpoint reads the sink's checkpoint, unless it is known for the
// poller whose context is live; an unreadable one is reported once and
// counts as absent (the target is delivered again and the record
// rewritten).
func (d *deliverer) checkpoint(ctx, live context.Context, id string) (Checkpoint, bool, error) {
	if live != nil && d.knownFor == live {
		return d.known, d.knownHave, nil
	}
	l, ok := d.env.ahead.Take(ctx, d.key, live)
	if !ok {
		l.Checkpoint, l.OK, l.Err = d.env.opts.store.Get(ctx, d.key)
	}
	cp, ok, err := l.Checkpoint, l.OK, l.Err
	if errors.Is(err, ErrCheckpointUnreadable) {
		if !d.unreadable {
			d.env.log.Error(err, "checkpoint unreadable; delivering the target again", "target", id, "sink", d.sink.name)
			d.unreadable = true
		}
		return Checkpoint{}, false, nil
	}
	if err == nil {
		d.known, d.knownHave, d.knownFor = cp, ok, live
	}
	return cp, ok, err
}

// markSuspended records in the checkpoint whether its target is
// suspended (once; a resumed one's mark is taken off), so that a sweep at
// a later start forgets a target suspended when last seen rather than
// removes it. A target without a checkpoint has nothing to mark: its sink
// was never told of it. A failure is logged; a suspended target's next
// poll tries again.
func (d *deliverer) markSuspended(ctx context.Context, t Target, suspended bool) {
	if d.knownHave && d.known.Suspended == suspended {
		return // as it should be: a poll that holds it again costs no read
	}
	cp, ok, err := d.checkpoint(ctx, nil, t.ID)
	if err != nil || !ok || cp.Suspended == suspended {
		return
	}
	cp.Suspended = suspended
	if err := d.put(ctx, nil, cp); err != nil && ctx.Err() == nil {
		d.env.log.Error(err, "recording the suspension in the checkpoint", "target", t.ID, "sink", d.sink.name)
	}
}

// put records cp as the sink's checkpoint. Once it failed, what the store
// holds is unknown: the next delivery reads it.
func (d *deliverer) put(ctx, live context.Context, cp Checkpoint) error {
	d.knownFor = nil
	if err := d.env.ahead.Write(d.key, func() error { return d.env.opts.store.Put(ctx, d.key, cp) }); err != nil {
		return err
	}
	d.known, d.knownHave, d.knownFor = cp, true, live
	return nil
}

// change makes the Change of a delivery: its reason (a new commit that
// does not descend from the last is a force-push), the paths changed
// since, and the tree; h follows Change.Root's once opened, and links
// collects what its file systems read through symbolic links.
func (d *deliverer) change(ctx context.Context, want *commitOffer, dec decision, h *handout.Trees, links *reads.Links) (Change, error) {
	t := *want.target
	c := Change{Target: t, Ref: want.ref, From: dec.from, To: want.commit, Reason: dec.reason}
	if want.verified != nil {
		c.Verified = *want.verified
	}
	if from := dec.from; dec.reason == ReasonNewCommit && !from.IsZero() {
		// Unknown ancestry (a shallow mirror) counts as a new commit; a
		// missing From (a rebuilt mirror) leaves Paths unknown.
		if anc, err := want.mirror.IsAncestor(ctx, from, want.commit); err == nil && !anc {
			c.Reason = ReasonForcePush
		}
		if paths, err := want.mirror.ChangedPaths(ctx, from, want.commit, t.Selection()); err == nil {
			c.Paths = paths
		}
	}
	fsys, err := want.mirror.FS(want.commit, t.Selection())
	// The whole repository, opened only if the sink reads it.
	c.Root = lazyfs.New(func() (fs.FS, error) {
		root, err := want.mirror.FS(want.commit, mirror.Selection{})
		if err == nil {
			h.Opened(root)
			links.Trace(root)
		}
		return root, err
	})
	if err != nil {
		if errors.Is(err, mirror.ErrCommitNotFound) || errors.Is(err, mirror.ErrCorrupt) {
			d.env.trigger(t.URL) // the mirror lost it (rebuilt): have it fetched again now
		}
		return c, err
	}
	links.Trace(fsys)
	if t.RecurseSubmodules {
		count := 0
		mounted, err := d.env.mountSubmodules(ctx, t, want.mirror, t.URL, want.commit, t.Selection(), fsys, 0, &count)
		if err != nil {
			closeAll(fsys, c.Root)
			return c, err
		}
		c.FS = mounted
		return c, nil
	}
	c.FS = fsys
	// A .gitmodules that cannot be read leaves the list empty: the FS is
	// what it is either way.
	subs, _ := want.mirror.Submodules(ctx, want.commit, t.Selection())
	for _, sm := range subs {
		c.Submodules = append(c.Submodules, sm.Path)
	}
	return c, nil
}

// record moves the checkpoint to the event's commit, whose tree the sink
// has already: nothing is delivered.
func (d *deliverer) record(ctx, live context.Context, ev Event, cp Checkpoint) error {
	cp.Commit, cp.Time, cp.Suspended = ev.Commit, time.Now(), false
	if err := d.put(ctx, live, cp); err != nil {
		return d.fail(ctx, ev, nil, err)
	}
	ev.Type = EventUpToDate
	d.env.emit(ev)
	return nil
}

// closeAll closes the file systems that are io.Closers.
func closeAll(fss ...fs.FS) {
	for _, f := range fss {
		if c, ok := f.(io.Closer); ok {
			_ = c.Close()
		}
	}
}

// call hands c to the sink (within the watcher's delivery limit: the
// pool's workers).
func (d *deliverer) call(ctx context.Context, c Change) (report any, took time.Duration, err error) {
	start := time.Now()
	report, err = d.env.callSink(ctx, func(ctx context.Context) (any, error) { return safeDeliver(ctx, d.sink.sink, c) })
	return report, time.Since(start), err
}

// fail reports a failed delivery, unless the watcher is stopping (the
// failure is then ours, not the sink's).
func (d *deliverer) fail(ctx context.Context, ev Event, c *Change, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	ev.Type, ev.Change, ev.Err = EventDeliveryFailed, c, err
	d.env.emit(ev)
	d.env.log.Error(err, "delivery failed", "target", ev.Target.ID, "sink", d.sink.name, "commit", short(ev.Commit), "attempt", ev.Attempt)
	return err
}

// ErrSinkAbandoned is returned (wrapped) for a sink call that did not
// return within the delivery timeout and the grace of [Timeouts.SinkGrace].
var ErrSinkAbandoned = errors.New("watcher: sink ignored its context; call abandoned")

// callSink runs call with a ctx bounded by the delivery timeout, and waits
// for it at most the sink grace after that ctx ends. A call still running
// then is abandoned: its goroutine runs on, counted in Stats.Abandoned, and
// the call counts as failed.
func (v *env) callSink(ctx context.Context, call func(ctx context.Context) (any, error)) (any, error) {
	dctx, cancel := context.WithTimeout(ctx, v.opts.deliverTimeout)
	defer cancel()
	type result struct {
		val any
		err error
	}
	const running, returned, gone = 0, 1, 2
	var state atomic.Int32
	done := make(chan result, 1)
	go func() {
		val, err := call(dctx)
		if !state.CompareAndSwap(running, returned) {
			v.abandoned.Add(-1) // it was given up on
		}
		done <- result{val, err}
	}()
	select {
	case r := <-done:
		return r.val, r.err
	case <-dctx.Done():
	}
	grace := time.NewTimer(v.opts.sinkGrace)
	defer grace.Stop()
	select {
	case r := <-done:
		return r.val, r.err
	case <-grace.C:
	}
	v.abandoned.Add(1)
	if !state.CompareAndSwap(running, gone) {
		v.abandoned.Add(-1) // it returned just now
		r := <-done
		return r.val, r.err
	}
	return nil, fmt.Errorf("%w: still running %s after its deadline", ErrSinkAbandoned, v.opts.sinkGrace)
}

// safeDeliver hands c to s, through DeliverReport when s is a [Reporter],
// and turns a sink's panic into an error, so that one bad sink cannot take
// the watcher down.
func safeDeliver(ctx context.Context, s Sink, c Change) (report any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = Permanent(fmt.Errorf("watcher: sink panicked: %v", p))
		}
	}()
	if r, ok := s.(Reporter); ok {
		return r.DeliverReport(ctx, c)
	}
	return nil, s.Deliver(ctx, c)
}

// removal is what the sink is told of t gone: Remove, or, when t was
// suspended, Forget (ev becomes EventForgotten; a sink that is not a
// Forgetter is told nothing then); nil when nothing is called.
func (d *deliverer) removal(t Target, ev *Event) func(context.Context) error {
	if t.Suspend {
		ev.Type = EventForgotten
		if f, ok := as[Forgetter](d.sink.sink); ok {
			return func(ctx context.Context) error { return f.Forget(ctx, t) }
		}
		return nil
	}
	if rm, ok := as[Remover](d.sink.sink); ok {
		return func(ctx context.Context) error { return rm.Remove(ctx, t) }
	}
	return nil
}

// removeStep makes one attempt at telling a Remover sink (a Forgetter, when
// the target was suspended), and forgets the checkpoint once it succeeded:
// true when the deliverer is done. A failed
// attempt is reported and retried with backoff, in a later step; the
// watcher stopping ends it where it is.
func (d *deliverer) removeStep(ctx context.Context, t Target) bool {
	w := d.env
	ev := Event{Type: EventRemoved, Target: &t, Sink: d.sink.name, Remote: gitutil.RedactURL(t.URL)}
	call := d.removal(t, &ev)
	if call != nil {
		d.state.attempt++
		_, err := w.callSink(ctx, func(ctx context.Context) (_ any, err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("watcher: sink panicked: %v", p)
				}
			}()
			return nil, call(ctx)
		})
		ev.Attempt = d.state.attempt
		if err != nil {
			if ctx.Err() != nil {
				return false
			}
			ev.Err = err
			w.emit(ev)
			d.state.retryIn(d, backoff.Delay(d.state.attempt, w.opts.retryMin, w.opts.retryMax), false)
			return false
		}
	}
	// Forgotten before it is reported, so observers see the final state.
	if err := w.ahead.Write(d.key, func() error { return w.opts.store.Delete(ctx, d.key) }); err != nil {
		w.log.Error(err, "forget checkpoint", "target", t.ID, "sink", d.sink.name)
	}
	ev.Err = nil
	w.emit(ev)
	return true
}
