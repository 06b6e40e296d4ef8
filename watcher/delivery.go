package watcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/backoff"
)

// desired is what a poller wants a sink to have.
type desired struct {
	target Target
	ref    string
	commit plumbing.Hash
	tree   plumbing.Hash
	mirror *gitutil.Mirror
	remote string    // redacted URL
	seen   time.Time // when the poller first saw commit for the target
}

// deliverer serializes the deliveries of one target to one sink. It holds at
// most one pending desire: a newer one replaces it (latest wins).
type deliverer struct {
	w    *Watcher
	key  string // checkpoint key: target ID and sink name
	sink namedSink
	prev *deliverer // a deliverer of the same key still removing
	wake chan struct{}
	done chan struct{}

	unreadable bool // an unreadable checkpoint was reported; run's goroutine only

	mu      sync.Mutex
	target  Target // the target as last seen, for Remove
	pending *desired
	resync  bool
	removed bool
}

func newDeliverer(w *Watcher, t Target, s namedSink, prev *deliverer) *deliverer {
	return &deliverer{
		w: w, key: t.ID + "/" + s.name, sink: s, prev: prev, target: t,
		wake: make(chan struct{}, 1), done: make(chan struct{}),
	}
}

func (d *deliverer) signal() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// offer makes want the next thing to deliver, replacing any pending one.
func (d *deliverer) offer(want desired) {
	d.mu.Lock()
	d.pending, d.target = &want, want.target
	d.mu.Unlock()
	d.signal()
}

func (d *deliverer) requestResync() {
	d.mu.Lock()
	d.resync = true
	d.mu.Unlock()
	d.signal()
}

// remove tells the deliverer its target is gone: it calls the sink's
// Remove, forgets the checkpoint and ends.
func (d *deliverer) remove() {
	d.mu.Lock()
	d.removed = true
	d.mu.Unlock()
	d.signal()
}

func (d *deliverer) run(ctx context.Context, dkey string) error {
	defer d.w.removed(dkey, d)
	defer close(d.done)
	if d.prev != nil {
		select {
		case <-d.prev.done:
		case <-ctx.Done():
			return nil
		}
	}
	var (
		want    *desired // latest desire taken
		resync  bool
		attempt int
		retry   *time.Timer
	)
	stopRetry := func() {
		if retry != nil {
			retry.Stop()
			retry = nil
			d.w.retrying.Add(-1)
		}
	}
	defer stopRetry()
	for {
		var retryC <-chan time.Time
		if retry != nil {
			retryC = retry.C
		}
		select {
		case <-ctx.Done():
			return nil
		case <-retryC:
			retry = nil
			d.w.retrying.Add(-1)
		case <-d.wake:
			d.mu.Lock()
			next, rs, rm, target := d.pending, d.resync, d.removed, d.target
			d.pending, d.resync = nil, false
			d.mu.Unlock()
			if rm {
				stopRetry()
				d.doRemove(ctx, target)
				return nil
			}
			if next != nil {
				want, attempt = next, 0
			}
			resync = resync || rs
			if want == nil || (next == nil && !rs) {
				continue
			}
			stopRetry()
		}
		err := d.deliver(ctx, want, resync, attempt+1)
		switch {
		case err == nil:
			resync, attempt = false, 0
		case ctx.Err() != nil:
			return nil
		case IsPermanent(err):
			// Wait for the next commit or resync; do not retry this one.
			resync, attempt = false, 0
		default:
			attempt++
			retry = time.NewTimer(backoff.Delay(attempt, d.w.opts.retryMin, d.w.opts.retryMax))
			d.w.retrying.Add(1)
		}
	}
}

// deliver hands want to the sink unless its checkpoint says it has it.
func (d *deliverer) deliver(ctx context.Context, want *desired, resync bool, attempt int) error {
	w := d.w
	t := want.target
	commit, tree, fp := want.commit.String(), want.tree.String(), t.fingerprint()
	ev := Event{Target: &t, Sink: d.sink.name, Remote: want.remote, Ref: want.ref, Commit: commit, Attempt: attempt, Seen: want.seen}
	failed := func(c *Change, err error) error {
		if ctx.Err() != nil {
			return ctx.Err() // shutting down: not a failure of the sink
		}
		ev.Type, ev.Change, ev.Err = EventDeliveryFailed, c, err
		w.emit(ev)
		w.log.Error(err, "delivery failed", "target", t.ID, "sink", d.sink.name, "commit", short(commit), "attempt", attempt)
		return err
	}

	cp, ok, err := w.opts.store.Get(ctx, d.key)
	if errors.Is(err, ErrCheckpointUnreadable) {
		// Treated as absent: delivered again, and the record rewritten.
		if !d.unreadable {
			w.log.Error(err, "checkpoint unreadable; delivering the target again", "target", t.ID, "sink", d.sink.name)
			d.unreadable = true
		}
		cp, ok, err = Checkpoint{}, false, nil
	}
	if err != nil {
		return failed(nil, err)
	}
	if ok && cp.Target == fp && !resync {
		if cp.Commit == commit {
			return nil
		}
		if cp.Tree == tree {
			cp.Commit, cp.Time = commit, time.Now()
			if err := w.opts.store.Put(ctx, d.key, cp); err != nil {
				return failed(nil, err)
			}
			ev.Type = EventUpToDate
			w.emit(ev)
			return nil
		}
	}

	c := Change{Target: t, Ref: want.ref, To: commit}
	switch {
	case !ok:
		c.Reason = ReasonInitial
	case cp.Target != fp:
		c.Reason, c.From = ReasonTargetChanged, cp.Commit
	case cp.Commit == commit:
		c.Reason, c.From = ReasonResync, cp.Commit
	default:
		c.From = cp.Commit
		from := plumbing.NewHash(cp.Commit)
		c.Reason = ReasonNewCommit
		// Unknown ancestry (a shallow mirror) counts as a new commit; a
		// missing From (a rebuilt mirror) leaves Paths unknown.
		if anc, aerr := want.mirror.IsAncestor(ctx, from, want.commit); aerr == nil && !anc {
			c.Reason = ReasonForcePush
		}
		if paths, perr := want.mirror.ChangedPaths(ctx, from, want.commit, t.Path); perr == nil {
			c.Paths = paths
		}
	}
	fsys, err := want.mirror.FS(want.commit, t.Path)
	if err != nil {
		if errors.Is(err, gitutil.ErrCommitNotFound) || errors.Is(err, gitutil.ErrCorrupt) {
			w.Trigger(t.URL) // the mirror lost it (rebuilt): have it fetched again now
		}
		return failed(&c, err)
	}
	c.FS = fsys
	abandoned := false
	defer func() {
		if closer, ok := fsys.(io.Closer); ok && !abandoned {
			_ = closer.Close() // an abandoned sink may read on
		}
	}()

	select {
	case w.deliverSem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	start := time.Now()
	ev.Result, err = w.callSink(ctx, func(ctx context.Context) (any, error) { return safeDeliver(ctx, d.sink.sink, c) })
	<-w.deliverSem
	abandoned = errors.Is(err, ErrSinkAbandoned)
	ev.Duration = time.Now().Sub(start)
	if err != nil {
		return failed(&c, err)
	}
	if err := w.opts.store.Put(ctx, d.key, Checkpoint{Commit: commit, Tree: tree, Target: fp, Time: time.Now()}); err != nil {
		// Delivered but not recorded: deliver again rather than lose it.
		return failed(&c, err)
	}
	d.unreadable = false
	ev.Type, ev.Change = EventDelivered, &c
	w.emit(ev)
	w.log.V(1).Info("delivered", "target", t.ID, "sink", d.sink.name, "commit", short(commit), "reason", c.Reason)
	return nil
}

// ErrSinkAbandoned is returned (wrapped) for a sink call that did not
// return within the delivery timeout and the grace of [WithSinkGrace].
var ErrSinkAbandoned = errors.New("watcher: sink ignored its context; call abandoned")

// callSink runs call with a ctx bounded by the delivery timeout, and waits
// for it at most the sink grace after that ctx ends. A call still running
// then is abandoned: its goroutine runs on, counted in Stats.Abandoned, and
// the call counts as failed.
func (w *Watcher) callSink(ctx context.Context, call func(ctx context.Context) (any, error)) (any, error) {
	dctx, cancel := context.WithTimeout(ctx, w.opts.deliverTimeout)
	defer cancel()
	type result struct {
		v   any
		err error
	}
	const running, returned, gone = 0, 1, 2
	var state atomic.Int32
	done := make(chan result, 1)
	go func() {
		v, err := call(dctx)
		if !state.CompareAndSwap(running, returned) {
			w.abandoned.Add(-1) // it was given up on
		}
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-dctx.Done():
	}
	grace := time.NewTimer(w.opts.sinkGrace)
	defer grace.Stop()
	select {
	case r := <-done:
		return r.v, r.err
	case <-grace.C:
	}
	w.abandoned.Add(1)
	if !state.CompareAndSwap(running, gone) {
		w.abandoned.Add(-1) // it returned just now
		r := <-done
		return r.v, r.err
	}
	return nil, fmt.Errorf("%w: still running %s after its deadline", ErrSinkAbandoned, w.opts.sinkGrace)
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

// doRemove tells a Remover sink, retrying with backoff while ctx lasts, and
// forgets the checkpoint.
func (d *deliverer) doRemove(ctx context.Context, t Target) {
	w := d.w
	ev := Event{Type: EventRemoved, Target: &t, Sink: d.sink.name, Remote: gitutil.RedactURL(t.URL)}
	if rm, ok := d.sink.sink.(Remover); ok {
		for attempt := 1; ; attempt++ {
			_, err := w.callSink(ctx, func(ctx context.Context) (_ any, err error) {
				defer func() {
					if p := recover(); p != nil {
						err = fmt.Errorf("watcher: sink panicked: %v", p)
					}
				}()
				return nil, rm.Remove(ctx, t)
			})
			ev.Attempt = attempt
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			ev.Err = err
			w.emit(ev)
			timer := time.NewTimer(backoff.Delay(attempt, w.opts.retryMin, w.opts.retryMax))
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-timer.C:
			}
		}
	}
	// Forgotten before it is reported, so observers see the final state.
	if err := w.opts.store.Delete(ctx, d.key); err != nil {
		w.log.Error(err, "forget checkpoint", "target", t.ID, "sink", d.sink.name)
	}
	ev.Err = nil
	w.emit(ev)
}
