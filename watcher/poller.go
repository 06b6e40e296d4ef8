package watcher

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/backoff"
)

// remote polls one repository (URL and credentials) for all the targets on
// it: one ref listing per cycle, a fetch only of what moved.
type remote struct {
	w        *Watcher
	key      string // normalised URL and credential identity
	urlKey   string // normalised URL, for Trigger
	url      string
	redacted string
	mirror   *gitutil.Mirror
	trigger  chan struct{}
	cancel   context.CancelFunc

	mu      sync.Mutex
	auth    *gitutil.Auth // the same identity, maybe a rotated secret
	targets map[string]*polled
}

// polled is a target's state in its poller.
type polled struct {
	b       *bound
	offered plumbing.Hash // commit last handed to the deliverers
	ref     string        // ref it last resolved to
}

func newRemote(w *Watcher, key string, spec *remoteSpec, m *gitutil.Mirror) *remote {
	r := &remote{
		w: w, key: key, urlKey: spec.urlKey, url: spec.url, redacted: gitutil.RedactURL(spec.url),
		auth: spec.auth, mirror: m, trigger: make(chan struct{}, 1), targets: map[string]*polled{},
	}
	for k, b := range spec.targets {
		r.targets[k] = &polled{b: b} // the first poll starts at once anyway
	}
	return r
}

// poke asks for a poll now; pokes during a poll coalesce into one more.
func (r *remote) poke() {
	select {
	case r.trigger <- struct{}{}:
	default:
	}
}

func (r *remote) stop() {
	if r.cancel != nil {
		r.cancel()
	}
}

func (r *remote) has(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.targets[key]
	return ok
}

// currentAuth is the credentials the remote polls with.
func (r *remote) currentAuth() *gitutil.Auth {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.auth
}

// setTargets replaces the target set and the credentials (a rotated
// secret of the same identity is used from the next poll on); new or
// changed targets are polled at once.
func (r *remote) setTargets(auth *gitutil.Auth, ts map[string]*bound) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.auth = auth
	next := make(map[string]*polled, len(ts))
	poll := false
	for key, b := range ts {
		if old, ok := r.targets[key]; ok && sameTargets(old.b, b) {
			next[key] = old
			continue
		}
		next[key] = &polled{b: b}
		poll = true
	}
	r.targets = next
	if poll {
		r.poke()
	}
}

func (r *remote) interval() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.w.opts.interval
	for _, p := range r.targets {
		if iv := p.b.t.Interval; iv > 0 && iv < d {
			d = iv
		}
	}
	return max(d, r.w.opts.minInterval)
}

func (r *remote) run(ctx context.Context) error {
	log := r.w.log.WithValues("remote", r.redacted)
	timer := time.NewTimer(0)
	defer func() { timer.Stop() }()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case <-r.trigger:
			timer.Stop()
		}
		iv := r.interval()
		wait := backoff.Jitter(iv, r.w.opts.jitter)
		if err := r.poll(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			failures++
			wait = max(iv, backoff.Delay(failures, r.w.opts.retryMin, r.w.opts.retryMax))
			if failures == 1 {
				log.Error(err, "poll failed", "retryIn", wait)
			} else {
				log.V(1).Info("poll failed again", "error", err.Error(), "failures", failures, "retryIn", wait)
			}
		} else {
			if failures > 0 {
				log.Info("poll recovered", "failures", failures)
			}
			failures = 0
		}
		timer = time.NewTimer(wait)
	}
}

// poll runs one cycle: list refs once, resolve every target, fetch what the
// mirror lacks, and offer each target whose commit moved to its deliverers.
func (r *remote) poll(ctx context.Context) (err error) {
	w := r.w
	start := time.Now()
	w.touchMirror(r.mirror.Dir())
	defer func() {
		d := time.Now().Sub(start)
		w.emit(Event{Type: EventPolled, Remote: r.redacted, Duration: d, Err: err})
		if err == nil {
			w.log.V(1).Info("polled", "remote", r.redacted, "duration", d)
		}
	}()

	r.mu.Lock()
	auth := r.auth
	targets := make([]*polled, 0, len(r.targets))
	for _, p := range r.targets {
		targets = append(targets, p)
	}
	r.mu.Unlock()
	sort.Slice(targets, func(i, j int) bool { return targets[i].b.key < targets[j].b.key })

	var refs gitutil.RefList
	var prefixes []string // what the targets' revisions need listed
	seen := map[string]bool{}
	for _, p := range targets {
		for _, pre := range p.b.rev.RefPrefixes() {
			if !seen[pre] {
				seen[pre] = true
				prefixes = append(prefixes, pre)
			}
		}
	}
	needList := len(prefixes) > 0
	if needList {
		select {
		case w.listSem <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		lctx, cancel := context.WithTimeout(ctx, w.opts.listTimeout)
		listStart := time.Now()
		refs, err = gitutil.ListRefs(lctx, r.url, auth, gitutil.WithRefPrefixes(prefixes...))
		cancel()
		<-w.listSem
		w.emit(Event{Type: EventListed, Remote: r.redacted, Duration: time.Now().Sub(listStart), Err: err})
		if err != nil {
			for _, p := range targets {
				r.fail(ctx, p, err)
			}
			return err
		}
	}

	// Resolve, and collect what the mirror lacks.
	type job struct {
		p   *polled
		res gitutil.Resolved
	}
	var jobs []job
	wantRefs := map[string]bool{}
	var wantCommits []plumbing.Hash
	for _, p := range targets {
		res, rerr := gitutil.Resolve(p.b.rev, refs)
		if rerr != nil {
			r.mu.Lock()
			lastRef := p.ref
			r.mu.Unlock()
			if lastRef != "" && errors.Is(rerr, gitutil.ErrRefNotFound) {
				t := p.b.t
				w.targetFailed(Event{Type: EventRefVanished, Target: &t, Remote: r.redacted, Ref: lastRef, Err: rerr})
			} else {
				r.fail(ctx, p, rerr)
			}
			continue
		}
		if !r.mirror.HasCommit(res.Commit) {
			if res.Ref != "" {
				wantRefs[res.Ref] = true
			} else {
				wantCommits = append(wantCommits, res.Commit)
			}
		}
		jobs = append(jobs, job{p, res})
	}

	fetchFailed := map[string]error{}
	if len(wantRefs) > 0 || len(wantCommits) > 0 {
		fetched, ferr := r.fetch(ctx, auth, wantRefs, wantCommits)
		if ferr != nil {
			err = ferr
		}
		for i := range jobs {
			j := &jobs[i]
			if h, ok := fetched[j.res.Ref]; ok && j.res.Ref != "" {
				j.res.Commit = h // the ref may have moved on since the listing
			}
			if ferr != nil && !r.mirror.HasCommit(j.res.Commit) {
				fetchFailed[j.p.b.key] = ferr
			}
		}
	}

	for _, j := range jobs {
		if ferr, failed := fetchFailed[j.p.b.key]; failed {
			r.fail(ctx, j.p, ferr)
			continue
		}
		r.mu.Lock()
		unchanged := j.p.offered == j.res.Commit
		r.mu.Unlock()
		if unchanged {
			w.targetPolled(j.p.b.t, r.redacted)
			continue
		}
		tree, terr := r.mirror.TreeHash(j.res.Commit, j.p.b.t.Path)
		if terr != nil {
			r.fail(ctx, j.p, terr)
			continue
		}
		w.targetPolled(j.p.b.t, r.redacted)
		d := desired{
			target: j.p.b.t, ref: j.res.Ref, commit: j.res.Commit, tree: tree,
			mirror: r.mirror, remote: r.redacted, seen: time.Now(),
		}
		for _, s := range j.p.b.sinks {
			s.offer(d)
		}
		r.mu.Lock()
		j.p.offered, j.p.ref = j.res.Commit, j.res.Ref
		r.mu.Unlock()
	}
	return err
}

// fetch brings the wanted refs and commits into the mirror, within the
// watcher's fetch concurrency limit.
func (r *remote) fetch(ctx context.Context, auth *gitutil.Auth, refs map[string]bool, commits []plumbing.Hash) (map[string]plumbing.Hash, error) {
	w := r.w
	select {
	case w.fetchSem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	var release sync.Once
	defer release.Do(func() { <-w.fetchSem })

	start := time.Now()
	names := make([]string, 0, len(refs))
	for n := range refs {
		names = append(names, n)
	}
	sort.Strings(names)
	fctx, cancel := context.WithTimeoutCause(ctx, w.opts.fetchTimeout, errFetchTimeout)
	defer cancel()
	fctx, stall := context.WithCancelCause(fctx)
	defer stall(nil)
	stopWatch := r.watchProgress(fctx, func() {
		release.Do(func() { <-w.fetchSem })
		w.log.Info("fetch stalled: its slot is given to others", "remote", r.redacted, "idle", w.opts.stallYield)
	}, func() { stall(ErrFetchStalled) })
	defer stopWatch()
	res, err := r.mirror.Fetch(fctx, auth, names)
	if res.Rebuilt != nil {
		w.log.Info("mirror rebuilt", "remote", r.redacted, "reason", res.Rebuilt.Error())
		w.emit(Event{Type: EventMirrorRebuilt, Remote: r.redacted, Err: res.Rebuilt})
	}
	if res.RepackErr != nil {
		w.log.Error(res.RepackErr, "mirror not repacked", "remote", r.redacted)
	} else if res.Repacked {
		w.log.V(1).Info("mirror repacked", "remote", r.redacted)
	}
	for _, c := range commits {
		if err != nil {
			break
		}
		_, err = r.mirror.FetchCommit(fctx, auth, c)
	}
	if err != nil {
		if cause := context.Cause(fctx); cause != nil && ctx.Err() == nil {
			err = fmt.Errorf("%w: %w", cause, err)
		}
		err = fmt.Errorf("watcher: fetch %s: %w", r.redacted, err)
	}
	w.emit(Event{Type: EventFetched, Remote: r.redacted, Duration: time.Now().Sub(start), Err: err})
	return res.Refs, err
}

var errFetchTimeout = errors.New("fetch timed out")

// ErrFetchStalled is returned (wrapped) for a fetch that made no progress
// for the abort time of [WithStallTimeouts].
var ErrFetchStalled = errors.New("fetch stalled: no progress")

// watchProgress watches the mirror's progress while a fetch runs: after
// stallYield without any, it calls yield once (the fetch gives up its
// slot); after stallAbort, abort. The returned func stops it and waits.
func (r *remote) watchProgress(ctx context.Context, yield, abort func()) (stop func()) {
	w := r.w
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		tick := min(w.opts.stallYield, w.opts.stallAbort) / 4
		last, since, yielded := r.mirror.Progress(), time.Now(), false
		for {
			t := time.NewTimer(tick)
			select {
			case <-done:
				t.Stop()
				return
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			now := time.Now()
			if p := r.mirror.Progress(); p != last {
				last, since = p, now
				continue
			}
			idle := now.Sub(since)
			if !yielded && idle >= w.opts.stallYield {
				yielded = true
				yield()
			}
			if idle >= w.opts.stallAbort {
				abort()
				return
			}
		}
	}()
	return func() {
		close(done)
		<-exited
	}
}

// fail reports that a target could not be brought to a commit this cycle,
// unless the remote is stopping (the failure is then ours, not the
// target's).
func (r *remote) fail(ctx context.Context, p *polled, err error) {
	if ctx.Err() != nil {
		return
	}
	t := p.b.t
	r.w.targetFailed(Event{Type: EventTargetFailed, Target: &t, Remote: r.redacted, Err: err})
}
