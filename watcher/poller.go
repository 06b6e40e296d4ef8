package watcher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/mirror"
	"github.com/modwatch/modwatch/internal/backoff"
	"github.com/modwatch/modwatch/watcher/internal/cachedir"
	"github.com/modwatch/modwatch/watcher/internal/fetchgate"
	"github.com/modwatch/modwatch/watcher/internal/hostgate"
	"github.com/modwatch/modwatch/watcher/internal/pool"
	"github.com/modwatch/modwatch/watcher/internal/stall"
)

// remote polls one repository (URL and credentials) for all the targets on
// it: one ref listing per cycle, a fetch only of what moved. It has no
// goroutine of its own: a poke or its timer schedules a poll on the
// watcher's pool of polls (see pool.Pool).
type remote struct {
	env      *env
	key      string // normalised URL and credential identity
	urlKey   string // normalised URL, for Trigger
	url      string
	redacted string
	host     string // whose budget its requests spend (see hostgate)
	dir      string // the mirror's, in the cache directory
	mirror   Mirror
	ctx      context.Context // ends when the remote stops; set by start
	cancel   context.CancelFunc
	sched    pool.Slot

	// Its steps only (one at a time).
	timer    *time.Timer
	gen      int           // the timer's generation
	armedIv  time.Duration // the interval the timer was set for
	failures int
	waiting  *listing  // a poll waiting for a fetch slot
	touched  time.Time // when its mirror was last marked used

	// Its place in the fetch gate: it asks for a slot, and is passed over
	// while its deliverers are asked whether it needs the fetch (see ask).
	gate fetchgate.Place
	// Its place in its host's line, for a listing: inLine while it
	// waits there (since queued), its poll about to begin; listing while
	// its poll holds the turn.
	hostPlace hostgate.Place
	inLine    bool
	listing   bool
	queued    time.Time

	mu      sync.Mutex
	auth    *gitutil.Auth // the same identity, maybe a rotated secret
	targets map[targetKey]*pollState
	// sorted are targets by key, and prefixes the ref prefixes they need
	// listed; made when the targets change, not by every poll, which
	// reads them as they are (a new slice replaces one, never a write).
	sorted   []*pollState
	prefixes []string
	// listTimeout and fetchTimeout bound its requests, as its targets'
	// Timeouts say (see Target.Timeout); made with sorted.
	listTimeout, fetchTimeout time.Duration
	poked                     bool // a poll is asked for now
	hinted                    bool // by a push hint: ahead of background polls at its host
	due                       int  // the timer of this generation fired
	armed                     int  // the generation the timer is set for
	stale                     int  // firings that began before the timer was stopped, and are to be ignored
}

// pollState is a target's state in its poller.
type pollState struct {
	bound   *boundTarget
	offered gitutil.Hash // commit last handed to the deliverers
	ref     string       // ref it last resolved to
	// mustFetch: a deliverer needs the tree of a commit offered before it
	// was fetched (see ask); the next poll fetches it, asking nothing.
	mustFetch bool
}

func newRemote(v *env, key, dir string, spec *remoteSpec, m Mirror) *remote {
	r := &remote{
		env: v, key: key, dir: dir, urlKey: spec.urlKey, url: spec.url, redacted: gitutil.RedactURL(spec.url), host: hostOf(spec.url),
		auth: spec.auth, mirror: m, targets: map[targetKey]*pollState{}, poked: true, // the first poll is at once
	}
	for k, b := range spec.targets {
		r.targets[k] = &pollState{bound: b}
	}
	r.index()
	return r
}

// start starts polling, on ctx (a poll's desires are delivered while it
// lasts: see commitOffer.live).
func (r *remote) start(ctx context.Context) {
	r.ctx, r.cancel = context.WithCancel(ctx)
	r.env.claim(r)
	r.env.polls.Start(r)
}

// poke asks for a poll now; pokes during a poll coalesce into one more.
func (r *remote) poke() {
	r.mu.Lock()
	r.poked = true
	r.mu.Unlock()
	if r.ctx != nil {
		r.env.polls.Schedule(r)
	}
}

// hint asks for a poll now, ahead of the background polls at its host
// (a push hint).
func (r *remote) hint() {
	r.mu.Lock()
	r.hinted = true
	r.mu.Unlock()
	r.poke()
}

// stop ends the remote: a poll in progress is cancelled, and no other
// starts.
func (r *remote) stop() {
	if r.cancel != nil {
		r.cancel()
		r.env.polls.Schedule(r) // its step sees it and ends it
	}
}

// Slot, Step and Finish make a remote a pool.Task, its steps its polls.
func (r *remote) Slot() *pool.Slot { return &r.sched }

// Place makes a remote a fetchgate.Waiter.
func (r *remote) Place() *fetchgate.Place { return &r.gate }

// HostPlace makes a remote a hostgate.Waiter.
func (r *remote) HostPlace() *hostgate.Place { return &r.hostPlace }

// arm sets the timer for the next generation's poll, in wait, and
// reports whether a poll was asked for meanwhile. The timer is one a
// remote, not one a poll: step stopped it, or it fired.
func (r *remote) arm(wait time.Duration) (poked bool) {
	r.gen++
	r.mu.Lock()
	r.armed = r.gen
	poked = r.poked
	r.mu.Unlock()
	if r.timer == nil {
		r.timer = time.AfterFunc(wait, r.fire)
	} else {
		r.timer.Reset(wait)
	}
	return poked
}

// stopTimer stops the timer before a poll. When it had fired already, its
// function began; unless it has recorded its generation, it would record
// the next one, and is counted stale (see fire).
func (r *remote) stopTimer() {
	if r.timer == nil || r.timer.Stop() {
		return
	}
	r.mu.Lock()
	if r.due != r.armed {
		r.stale++
	}
	r.mu.Unlock()
}

// fire is the timer's function: the poll of the generation it was set for
// is due. A firing that began before step stopped the timer is stale.
func (r *remote) fire() {
	r.mu.Lock()
	if r.stale > 0 {
		r.stale--
		r.mu.Unlock()
		return
	}
	r.due = r.armed
	r.mu.Unlock()
	r.env.polls.Schedule(r)
}

func (r *remote) Finish() {
	cachedir.Touch(r.dir) // its last use
	if r.timer != nil {
		r.timer.Stop()
	}
	if r.cancel != nil {
		r.cancel()
	}
	if l := r.waiting; l != nil && l.ask != nil {
		l.ask.end()
	}
	r.env.fetches.Leave(r)
	r.env.hosts.Leave(r)
}

func (r *remote) has(key targetKey) bool {
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
// changed targets are polled at once. A target whose interval only
// changed is not: a shorter interval for the remote polls it at once, a
// longer one moves its next poll later (see step).
func (r *remote) setTargets(auth *gitutil.Auth, ts map[targetKey]*boundTarget) {
	if r.retarget(auth, ts) {
		r.poke()
	}
}

// retarget is setTargets under r.mu; true when a target is new or changed.
func (r *remote) retarget(auth *gitutil.Auth, ts map[targetKey]*boundTarget) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.auth = auth
	before := r.intervalLocked()
	next := make(map[targetKey]*pollState, len(ts))
	poll, retimed := false, false
	for key, b := range ts {
		old, ok := r.targets[key]
		switch {
		case ok && sameTargets(old.bound, b):
			next[key] = old
		case ok && sameButInterval(old.bound, b):
			p := *old // a poll may be reading old
			p.bound = b
			next[key], retimed = &p, true
		default:
			next[key] = &pollState{bound: b}
			poll = true
		}
	}
	r.targets = next
	r.index()
	return poll || (retimed && r.intervalLocked() < before)
}

// index makes sorted and prefixes of targets, under r.mu.
func (r *remote) index() {
	r.sorted = make([]*pollState, 0, len(r.targets))
	for _, p := range r.targets {
		r.sorted = append(r.sorted, p)
	}
	slices.SortFunc(r.sorted, func(a, b *pollState) int { return a.bound.key.compare(b.bound.key) })
	r.prefixes = refPrefixes(r.sorted)
	r.listTimeout, r.fetchTimeout = timeouts(r.sorted, r.env.opts.listTimeout, r.env.opts.fetchTimeout)
}

// timeouts are the bounds of a remote's listing and fetches: the longest
// Timeout of its targets, a target without one counting as fetch (the
// watcher's), none longer than fetch (a target shortens its remote's
// bound, never lengthens it past the program's), and the listing never
// longer than list.
func timeouts(targets []*pollState, list, fetch time.Duration) (time.Duration, time.Duration) {
	longest := time.Duration(0)
	for _, p := range targets {
		longest = max(longest, min(cmp.Or(p.bound.target.Timeout, fetch), fetch))
	}
	if longest == 0 {
		return list, fetch // no target: the watcher's
	}
	return min(list, longest), longest
}

// requestTimeouts are the remote's listTimeout and fetchTimeout.
func (r *remote) requestTimeouts() (list, fetch time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.listTimeout, r.fetchTimeout
}

func (r *remote) interval() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.intervalLocked()
}

// intervalLocked is interval, under r.mu.
func (r *remote) intervalLocked() time.Duration {
	d := r.env.opts.interval
	for _, p := range r.targets {
		if iv := p.bound.target.Interval; iv > 0 && iv < d {
			d = iv
		}
	}
	return max(d, r.env.opts.minInterval)
}

// Step polls when a poll is due (asked for, or its timer fired), then sets
// the timer for the next: the interval, with jitter, or a backoff after a
// failure. A poll that must wait for a fetch slot parks (see fetchgate.Gate)
// and goes on in the step its slot schedules. It reports whether the
// remote has stopped.
func (r *remote) Step(context.Context) bool {
	ctx := r.ctx
	if ctx.Err() != nil {
		return true
	}
	if l := r.waiting; l != nil {
		if l.ask != nil && l.ask.settle() {
			// Every deliverer asked has its commit: no fetch.
			r.env.fetches.Leave(r)
			r.waiting = nil
			return r.afterPoll(ctx, r.offerSettled(l))
		}
		if !r.env.fetches.TryOrPark(r) {
			return false // still in line (a poke, a timer or an answer woke it)
		}
		r.waiting = nil
		return r.afterPoll(ctx, r.fetchAndOffer(ctx, l))
	}
	if !r.turn() {
		return false
	}
	l, err := r.list(ctx)
	switch {
	case err != nil:
	case !l.wants.any():
		err = r.fetchAndOffer(ctx, l)
	default:
		// With a shard, another replica may have polled the remote and
		// delivered its targets (a takeover): ask before any fetch.
		// Without one, ask only while waiting for a slot.
		askNow := r.env.opts.shard != nil
		if askNow {
			l.ask = r.askFirst(ctx, l)
		}
		if r.env.fetches.TryOrPark(r) { // none taken while the asking lasts
			err = r.fetchAndOffer(ctx, l)
			break
		}
		r.waiting = l
		if !askNow {
			l.ask = r.askFirst(ctx, l)
		}
		return false
	}
	return r.afterPoll(ctx, err)
}

// turn reports whether a poll begins now: one is due (asked for, or its
// timer fired) and its host has a turn for its listing. A poll that must
// wait for its turn parks in its host's line (see hostgate.Gate), and
// begins in the step its turn schedules; a hint meanwhile moves it ahead.
func (r *remote) turn() bool {
	r.mu.Lock()
	poked, due, hinted, lists := r.poked, r.due, r.hinted, len(r.prefixes) > 0
	r.poked, r.hinted = false, false
	r.mu.Unlock()
	if !r.inLine {
		if !poked && (r.timer == nil || due != r.gen) {
			return false // a stale timer's firing
		}
		if !poked && r.postpone() {
			return false
		}
		r.stopTimer()
		r.queued = time.Now()
		if !lists {
			return true // targets pinned to commits: no listing, no turn
		}
	}
	if !r.env.hosts.TryOrPark(r, r.host, hinted) {
		r.inLine = true
		return false
	}
	r.inLine, r.listing = false, true
	return true
}

// postpone sets the timer later when a longer interval was given since it
// was set: the poll is that much later (true), not now.
func (r *remote) postpone() bool {
	iv := r.interval()
	if iv <= r.armedIv {
		return false
	}
	wait := iv - r.armedIv
	r.armedIv = iv
	if r.arm(wait) {
		r.env.polls.Schedule(r)
	}
	return true
}

// afterPoll ends a poll: it counts a failure, and sets the timer for the
// next poll. A poke that came while the poll waited for a fetch slot
// schedules another step. It reports whether the remote has stopped.
func (r *remote) afterPoll(ctx context.Context, err error) bool {
	iv := r.interval()
	r.armedIv = iv
	wait := backoff.Jitter(iv, r.env.opts.jitter)
	if err != nil {
		if ctx.Err() != nil {
			return true
		}
		var failure bool
		wait, failure = r.retryWait(err)
		if next := (*RetryError)(nil); errors.As(err, &next) {
			wait = max(time.Until(next.At), 0) // as the targets were told
		}
		log := r.env.log.WithValues("remote", r.redacted)
		switch {
		case !failure: // the host's, logged once an episode (see rateLimited)
			log.V(1).Info("poll waits for its host's rate limit", "error", err.Error(), "retryIn", wait)
		case r.failures == 0:
			log.Error(err, "poll failed", "retryIn", wait)
		default:
			log.V(1).Info("poll failed again", "error", err.Error(), "failures", r.failures+1, "retryIn", wait)
		}
		if failure {
			r.failures++
		}
	} else {
		if r.failures > 0 {
			r.env.log.Info("poll recovered", "remote", r.redacted, "failures", r.failures)
		}
		r.failures = 0
	}
	poked := r.arm(wait)
	if poked {
		r.env.polls.Schedule(r)
	}
	return false
}

// retryWait is how long after a failed poll (err) the remote is polled
// again, and whether it counts as the remote's failure: a rate limit is
// its host's, and its poll waits for the limit's end, not a backoff.
func (r *remote) retryWait(err error) (time.Duration, bool) {
	iv := r.interval()
	if rl := (*gitutil.RateLimitError)(nil); errors.As(err, &rl) {
		return max(backoff.Jitter(iv, r.env.opts.jitter), time.Until(rl.Until)), false
	}
	return max(iv, backoff.Delay(r.failures+1, r.env.opts.retryMin, r.env.opts.retryMax)), true
}

// listing is what a poll's listing found: the targets' commits and what
// the mirror lacks of them.
type listing struct {
	start time.Time
	auth  *gitutil.Auth
	jobs  []job
	buf   *[]job // where jobs came from (see jobLists)
	wants fetchWants
	ask   *ask // what the deliverers were asked while it waits
}

// jobLists hold the job slices of ended polls, for the next polls to
// reuse: a poll that finds nothing new then allocates no slice. A slice
// is put back cleared, holding no target.
var jobLists sync.Pool // of *[]job

// takeJobs returns an empty job slice of capacity n or more, and where it
// goes back to (see release).
func takeJobs(n int) *[]job {
	if buf, ok := jobLists.Get().(*[]job); ok && cap(*buf) >= n {
		return buf
	}
	buf := make([]job, 0, n)
	return &buf
}

// release puts the poll's job slice back for another poll; the poll reads
// its jobs no more.
func (l *listing) release() {
	if l.buf == nil {
		return
	}
	clear(l.jobs[:cap(l.jobs)])
	*l.buf = l.jobs[:0]
	jobLists.Put(l.buf)
	l.jobs, l.buf = nil, nil
}

// list begins a poll: it lists refs once and resolves every target. A
// failed listing ends the poll.
func (r *remote) list(ctx context.Context) (*listing, error) {
	l := &listing{start: time.Now()}
	if l.start.Sub(r.touched) >= r.env.opts.mirrorGrace/cachedir.TouchesPerGrace {
		cachedir.Touch(r.dir)
		r.touched = l.start
	}
	auth, targets, prefixes := r.snapshot()
	l.auth = auth
	refs, err := r.listRefs(ctx, l.auth, prefixes)
	if err != nil {
		wait, _ := r.retryWait(err)
		err = &RetryError{Err: err, At: time.Now().Add(wait)}
		for _, p := range targets {
			r.fail(ctx, p, err)
		}
		r.reportPoll(l.start, err)
		return nil, err
	}
	l.buf = takeJobs(len(targets))
	l.jobs, l.wants = r.resolve(ctx, *l.buf, targets, refs)
	return l, nil
}

// fetchAndOffer ends a poll: it fetches what the mirror lacks, in the
// fetch slot the caller holds when something is missing, and offers each
// target whose commit moved to its deliverers.
func (r *remote) fetchAndOffer(ctx context.Context, l *listing) (err error) {
	defer func() {
		l.release()
		r.reportPoll(l.start, err)
	}()
	if l.ask != nil {
		// Fetched after all: what was offered unfetched is offered
		// again, whole (a deliverer that had its commit skips it again,
		// from the checkpoint it keeps).
		l.ask.end()
		r.mu.Lock()
		for _, j := range l.jobs {
			if j.missing {
				j.poll.offered = gitutil.Hash{}
			}
		}
		r.mu.Unlock()
	}
	var fetchFailed map[targetKey]error
	if l.wants.any() {
		fetchFailed, err = r.fetchMissing(ctx, l.auth, l.jobs, l.wants)
	}
	if err != nil {
		// A failed poll: its targets are told when the next is.
		wait, _ := r.retryWait(err)
		next := time.Now().Add(wait)
		for k, ferr := range fetchFailed {
			fetchFailed[k] = &RetryError{Err: ferr, At: next}
		}
		err = &RetryError{Err: err, At: next}
	}
	if pf, ok := r.mirror.(PathFetcher); ok && pf.Partial() {
		fetchFailed = r.fetchPaths(ctx, pf, l.auth, l.jobs, fetchFailed)
	}
	r.offerAll(ctx, l.jobs, fetchFailed)
	return err
}

// offerSettled ends a poll that needs no fetch after all: every target
// whose commit the mirror lacks was offered it unfetched, and its
// deliverers have it (see ask). The others are offered as after a fetch.
func (r *remote) offerSettled(l *listing) error {
	r.reportPoll(l.start, nil)
	r.offerAll(r.ctx, l.jobs, nil)
	l.release()
	return nil
}

// askFirst is for a poll that waits in line for a fetch slot: when each
// target whose commit the mirror lacks is offered it for the first time
// in this poller (the remote was polled elsewhere, by another replica or
// before a restart), the deliverers are offered the commit unfetched, and
// asked whether their checkpoints hold it already. When all of them do,
// the poll needs no fetch (see step): a replica that takes over remotes
// whose targets are delivered polls them without cloning them. nil: not
// asked (some target needs the fetch anyway).
func (r *remote) askFirst(ctx context.Context, l *listing) *ask {
	var first []job
	a := &ask{remote: r}
	r.mu.Lock()
	for _, j := range l.jobs {
		if !j.missing {
			continue
		}
		t := j.poll.bound.target
		if !j.poll.offered.IsZero() || j.poll.mustFetch || t.Verify != nil || t.Suspend {
			r.mu.Unlock()
			return nil
		}
		first = append(first, j)
		a.asked += len(j.poll.bound.sinks)
	}
	if a.asked == 0 {
		r.mu.Unlock()
		return nil
	}
	for _, j := range first {
		j.poll.offered, j.poll.ref = j.res.Commit, j.res.Ref
	}
	r.mu.Unlock()
	r.env.fetches.SetAsking(r, true)
	a.mu.Lock()
	a.patience = time.AfterFunc(askPatience, a.expire)
	a.mu.Unlock()
	for _, j := range first {
		d := &commitOffer{
			target: &j.poll.bound.target, ref: j.res.Ref, commit: j.res.Commit, fingerprint: j.poll.bound.target.fingerprint(r.urlKey),
			mirror: r.mirror, remote: r.redacted, seen: time.Now(), live: ctx,
			question: &question{ask: a, poll: j.poll},
		}
		for _, s := range j.poll.bound.sinks {
			s.offer(d)
		}
	}
	return a
}

// askPatience bounds the wait for the answers of an ask: a deliverer busy
// with a slow sink answers late, and its remote then fetches as if it
// had answered that it needs the fetch.
const askPatience = 5 * time.Second

// ask collects the answers of the deliverers offered a commit unfetched
// by one poll (see askFirst). While they are outstanding, the remote
// takes no fetch slot (see fetchgate.Gate): the first "no" or its patience
// ending lets it take one.
type ask struct {
	remote *remote

	mu       sync.Mutex
	asked    int // deliverers
	settled  int // answered that their checkpoint holds the commit
	needed   bool
	done     bool // the poll has ended
	patience *time.Timer
}

// question is what a deliverer offered a commit unfetched answers: does
// its checkpoint hold it?
type question struct {
	ask  *ask
	poll *pollState
}

// answer takes a deliverer's answer: whether its checkpoint holds the
// commit. The last "yes" wakes the waiting poll; a "no" after the poll
// ended (a resync of what was never fetched) has the commit fetched and
// offered again.
func (q *question) answer(has bool) {
	a := q.ask
	a.mu.Lock()
	if a.done {
		a.mu.Unlock()
		if !has {
			a.remote.refetch(q.poll)
		}
		return
	}
	first := false
	if has {
		a.settled++
	} else if !a.needed {
		a.needed, first = true, true
		a.patience.Stop()
	}
	wake := a.settled == a.asked
	a.mu.Unlock()
	if first {
		a.remote.env.fetches.SetAsking(a.remote, false) // to fetch
	}
	if wake || first {
		a.remote.env.polls.Schedule(a.remote)
	}
}

// expire ends the wait for answers that have not come: the remote
// fetches.
func (a *ask) expire() {
	a.mu.Lock()
	if a.done || a.needed {
		a.mu.Unlock()
		return
	}
	a.needed = true
	a.mu.Unlock()
	a.remote.env.fetches.SetAsking(a.remote, false)
	a.remote.env.polls.Schedule(a.remote)
}

// settle ends the asking when every deliverer asked has its commit.
func (a *ask) settle() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.needed || a.settled < a.asked {
		return false
	}
	a.done = true
	a.patience.Stop()
	return true
}

// end ends the asking: the poll fetches.
func (a *ask) end() {
	a.mu.Lock()
	a.done = true
	a.patience.Stop()
	a.mu.Unlock()
	a.remote.env.fetches.SetAsking(a.remote, false)
}

// refetch has the next poll fetch p's commit and offer it again, whole.
func (r *remote) refetch(p *pollState) {
	r.mu.Lock()
	p.offered, p.mustFetch = gitutil.Hash{}, true
	r.mu.Unlock()
	r.poke()
}

// reportPoll reports a poll that began at start.
func (r *remote) reportPoll(start time.Time, err error) {
	d := time.Since(start)
	r.env.emit(Event{Type: EventPolled, Remote: r.redacted, Duration: d, Err: err})
	if log := r.env.log.V(1); err == nil && log.Enabled() {
		// Asked first: the arguments would be allocated on every poll.
		log.Info("polled", "remote", r.redacted, "duration", d)
	}
}

// fetchPaths brings the files of the jobs about to be offered (see
// decideOffer) into a mirror that may lack them, one call per
// commit for all its targets' paths, within the fetch limit. It returns
// failed with the jobs it could not serve added.
func (r *remote) fetchPaths(ctx context.Context, pf PathFetcher, auth *gitutil.Auth, jobs []job, failed map[targetKey]error) map[targetKey]error {
	var commits []gitutil.Hash
	paths := map[gitutil.Hash][]string{}
	keys := map[gitutil.Hash][]targetKey{}
	for _, j := range jobs {
		_, bad := failed[j.poll.bound.key]
		if decideOffer(r.offerFacts(j, bad)).action != offerCommit {
			continue
		}
		c := j.res.Commit
		if _, ok := paths[c]; !ok {
			commits = append(commits, c)
		}
		for _, p := range j.poll.bound.target.Selection().Roots() {
			if !slices.Contains(paths[c], p) {
				paths[c] = append(paths[c], p)
			}
		}
		keys[c] = append(keys[c], j.poll.bound.key)
	}
	for _, c := range commits {
		if err := r.withFetchSlot(ctx, func(fctx context.Context) error { return pf.FetchPaths(fctx, auth, c, paths[c]) }); err != nil {
			if failed == nil {
				failed = map[targetKey]error{}
			}
			for _, k := range keys[c] {
				failed[k] = fmt.Errorf("watcher: fetch files of %s at %s: %w", r.redacted, c, err)
			}
		}
	}
	return failed
}

// withFetchSlot runs fn in one of the watcher's fetch slots and a turn
// at the remote's host, bounded by its fetch timeout.
func (r *remote) withFetchSlot(ctx context.Context, fn func(context.Context) error) error {
	if err := r.env.fetches.Acquire(ctx); err != nil {
		return err
	}
	defer r.env.fetches.Release()
	return r.env.atHost(ctx, r.host, r.redacted, func() error {
		_, timeout := r.requestTimeouts()
		fctx, cancel := context.WithTimeoutCause(ctx, timeout, errFetchTimeout)
		defer cancel()
		return fn(fctx)
	})
}

// snapshot returns the credentials, the targets of this cycle in a stable
// order (read only), and the ref prefixes they need listed.
func (r *remote) snapshot() (*gitutil.Auth, []*pollState, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.auth, r.sorted, r.prefixes
}

// refPrefixes returns the ref prefixes the targets' revisions need listed,
// once each; none when every revision is a commit.
func refPrefixes(targets []*pollState) []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range targets {
		for _, pre := range p.bound.rev.RefPrefixes() {
			if !seen[pre] {
				seen[pre] = true
				out = append(out, pre)
			}
		}
	}
	return out
}

// listRefs lists the remote's refs under prefixes, in the turn at its
// host the poll took (see turn), which it gives back; with no prefixes it
// lists nothing. A rate limit in the answer stops every request to the
// host until its end.
func (r *remote) listRefs(ctx context.Context, auth *gitutil.Auth, prefixes []string) (gitutil.RefList, error) {
	held := r.listing
	if held {
		r.listing = false
		defer r.env.hosts.Release(r.host, true)
	}
	if len(prefixes) == 0 {
		return gitutil.RefList{}, nil
	}
	if !held {
		// Its targets came to need a listing since its turn was not
		// asked for: it waits for one now.
		if err := r.env.hosts.Acquire(ctx, r.host); err != nil {
			return gitutil.RefList{}, err
		}
		defer r.env.hosts.Release(r.host, false)
	}
	timeout, _ := r.requestTimeouts()
	lctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	refs, err := r.env.opts.git.ListRefs(lctx, r.url, auth, prefixes)
	if err == nil {
		r.env.hosts.Listed(r.host)
	}
	r.env.emit(Event{Type: EventListed, Remote: r.redacted, Duration: time.Since(start), Waited: start.Sub(r.queued), Err: err})
	r.env.rateLimited(r.host, r.redacted, err)
	return refs, err
}

// job is a target of this cycle and the commit it resolved to.
type job struct {
	poll    *pollState
	res     gitutil.Resolved
	missing bool // the mirror lacks the commit
}

// fetchWants is what the mirror lacks of this cycle's commits: refs to fetch
// (with the object the listing saw each at), and commits no ref names.
type fetchWants struct {
	refs    map[string]gitutil.Hash
	commits []gitutil.Hash
}

func (m fetchWants) any() bool { return len(m.refs) > 0 || len(m.commits) > 0 }

// resolve finds each target's commit in refs, and what the mirror lacks of
// them, appending a job to jobs for each. A target that does not resolve
// is reported and left out. The mirror is asked once for a run of targets
// at one commit (a remote's targets are mostly on one branch), not once a
// target: each time, it looks the commit up in the mirror's pack indexes.
func (r *remote) resolve(ctx context.Context, jobs []job, targets []*pollState, refs gitutil.RefList) ([]job, fetchWants) {
	var m fetchWants
	var asked gitutil.Hash
	has, looked := false, false
	for _, p := range targets {
		res, err := gitutil.Resolve(p.bound.rev, refs)
		if err != nil {
			r.mu.Lock()
			lastRef := p.ref
			r.mu.Unlock()
			if lastRef != "" && errors.Is(err, gitutil.ErrRefNotFound) {
				t := p.bound.target
				r.env.targetFailed(Event{Type: EventRefVanished, Target: &t, Remote: r.redacted, Ref: lastRef, Err: err})
			} else {
				r.fail(ctx, p, err)
			}
			continue
		}
		j := job{poll: p, res: res}
		if !looked || res.Commit != asked {
			asked, has, looked = res.Commit, r.mirror.HasCommit(res.Commit), true
		}
		if !has {
			j.missing = true
			if res.Ref != "" {
				if m.refs == nil {
					m.refs = map[string]gitutil.Hash{}
				}
				m.refs[res.Ref] = refs.Refs[res.Ref]
			} else {
				m.commits = append(m.commits, res.Commit)
			}
		}
		jobs = append(jobs, j)
	}
	return jobs, m
}

// fetchMissing fetches what the mirror lacks, moves each job to where its
// ref is now (it may have moved since the listing), and returns the jobs
// whose commit is still missing after a failed fetch, with the error.
func (r *remote) fetchMissing(ctx context.Context, auth *gitutil.Auth, jobs []job, m fetchWants) (map[targetKey]error, error) {
	if m.refs == nil {
		m.refs = map[string]gitutil.Hash{} // a Mirror is given a map, never nil
	}
	fetched, err := r.fetch(ctx, auth, m.refs, m.commits)
	failed := map[targetKey]error{}
	for i := range jobs {
		j := &jobs[i]
		if h, ok := fetched.Refs[j.res.Ref]; ok && j.res.Ref != "" {
			j.res.Commit = h
		}
		if rerr, ok := fetched.RefErrors[j.res.Ref]; ok && j.res.Ref != "" {
			failed[j.poll.bound.key] = rerr // a tag on a tree: this target's, not the remote's
			continue
		}
		if err != nil && !r.mirror.HasCommit(j.res.Commit) {
			failed[j.poll.bound.key] = err
		}
	}
	return failed, err
}

// offerAll does with each job what decideOffer says: it reports a failed
// fetch, holds a suspended target, or hands a commit that moved to the
// target's deliverers.
func (r *remote) offerAll(ctx context.Context, jobs []job, fetchFailed map[targetKey]error) {
	for _, j := range jobs {
		fetchErr, failed := fetchFailed[j.poll.bound.key]
		dec := decideOffer(r.offerFacts(j, failed))
		switch dec.action {
		case offerFailed:
			r.failJob(ctx, j, fetchErr)
		case offerKept:
			if r.env.targetPolled(j.poll.bound.target, r.redacted, j.res) && !j.missing {
				// Recovered: each deliverer is offered the commit again,
				// to say whether its sink has it (EventUpToDate), for
				// an observer that said the failure on an object. One
				// the mirror lacks was asked just now, unfetched (askFirst).
				r.offer(ctx, j, j.poll.bound.target.Verify != nil)
			}
		case offerHeld:
			r.hold(j)
		case offerCommit:
			r.offer(ctx, j, dec.verify)
		}
	}
}

// offerFacts are the facts of j for decideOffer.
func (r *remote) offerFacts(j job, fetchFailed bool) offerFacts {
	r.mu.Lock()
	offered := j.poll.offered == j.res.Commit
	r.mu.Unlock()
	t := &j.poll.bound.target
	return offerFacts{fetchFailed: fetchFailed, offered: offered, suspended: t.Suspend, verify: t.Verify != nil}
}

// hold tells the deliverers of j's suspended target to drop what they
// were to deliver, and reports the commit it is held at.
func (r *remote) hold(j job) {
	for _, s := range j.poll.bound.sinks {
		s.hold()
	}
	r.env.targetPolled(j.poll.bound.target, r.redacted, j.res)
	t := j.poll.bound.target
	r.env.emit(Event{Type: EventSuspended, Target: &t, Remote: r.redacted, Ref: j.res.Ref, Commit: j.res.Commit})
	r.mu.Lock()
	j.poll.offered, j.poll.ref = j.res.Commit, j.res.Ref
	r.mu.Unlock()
}

// offer verifies j's commit when asked, hashes its tree and hands it to
// the target's deliverers. A commit that fails either is not offered:
// the last delivery stays, and the next poll tries again.
func (r *remote) offer(ctx context.Context, j job, verify bool) {
	var verified *[]Signature
	if verify {
		sigs, err := r.verify(j, *j.poll.bound.target.Verify)
		if err != nil {
			r.failJob(ctx, j, err)
			return
		}
		verified = &sigs
	}
	tree, err := r.mirror.TreeHash(ctx, j.res.Commit, j.poll.bound.target.Selection())
	if err != nil {
		r.failJob(ctx, j, err)
		return
	}
	r.env.targetPolled(j.poll.bound.target, r.redacted, j.res)
	d := &commitOffer{ // one for all the target's sinks
		target: &j.poll.bound.target, ref: j.res.Ref, commit: j.res.Commit, tree: tree, fingerprint: j.poll.bound.target.fingerprint(r.urlKey),
		mirror: r.mirror, remote: r.redacted, seen: time.Now(), live: ctx, verified: verified,
	}
	for _, s := range j.poll.bound.sinks {
		s.offer(d)
	}
	r.mu.Lock()
	j.poll.offered, j.poll.ref, j.poll.mustFetch = j.res.Commit, j.res.Ref, false
	r.mu.Unlock()
}

// verify checks the signatures the target's Verify asks for, and returns
// them.
func (r *remote) verify(j job, v Verify) ([]Signature, error) {
	var out []Signature
	if v.tag() {
		tag, ok := strings.CutPrefix(j.res.Ref, "refs/tags/")
		if !ok {
			return nil, fmt.Errorf("%w: verify mode %s needs a revision that resolves through a tag", mirror.ErrUnverified, v.Mode)
		}
		// The mirror's tag, checked to lead to the commit delivered.
		signer, err := r.mirror.VerifyTag(j.res.Ref, j.res.Commit, v.KeyRing)
		if err != nil {
			return nil, err
		}
		out = append(out, Signature{Kind: "tag", Name: tag, Signer: signer})
	}
	if v.commit() {
		signer, err := r.mirror.VerifyCommit(j.res.Commit, v.KeyRing)
		if err != nil {
			return nil, err
		}
		out = append(out, Signature{Kind: "commit", Name: j.res.Commit.String(), Signer: signer})
	}
	return out, nil
}

// fetch brings the wanted refs and commits into the mirror, in the fetch
// slot the caller took (see fetchgate.Gate.TryOrPark), which it gives back.
func (r *remote) fetch(ctx context.Context, auth *gitutil.Auth, refs map[string]gitutil.Hash, commits []gitutil.Hash) (mirror.FetchResult, error) {
	w := r.env
	var release sync.Once
	defer release.Do(w.fetches.Release)

	queued := time.Now()
	if err := w.hosts.Acquire(ctx, r.host); err != nil {
		// No request was sent: no fetch to report.
		return mirror.FetchResult{}, fmt.Errorf("watcher: fetch %s: %w", r.redacted, err)
	}
	held := true // the turn of the fetch of refs; each commit takes one more
	defer func() {
		if held {
			w.hosts.Release(r.host, false)
		}
	}()
	start := time.Now()
	_, timeout := r.requestTimeouts()
	fctx, cancel := context.WithTimeoutCause(ctx, timeout, errFetchTimeout)
	defer cancel()
	fctx, abort := context.WithCancelCause(fctx)
	defer abort(nil)
	stopWatch := stall.Watch(fctx, r.mirror.Progress, w.opts.stallYield, w.opts.stallAbort, func() {
		release.Do(w.fetches.Release)
		w.log.Info("fetch stalled: its slot is given to others", "remote", r.redacted, "idle", w.opts.stallYield)
	}, func() { abort(ErrFetchStalled) })
	defer stopWatch()
	res, err := r.mirror.FetchListed(fctx, auth, refs)
	w.hosts.Charge(r.host, res.Requests-1)
	if res.Rebuilt != nil {
		w.log.Info("mirror rebuilt", "remote", r.redacted, "reason", res.Rebuilt.Error())
		w.emit(Event{Type: EventMirrorRebuilt, Remote: r.redacted, Err: res.Rebuilt})
	}
	if res.RepackErr != nil {
		w.log.Error(res.RepackErr, "mirror not repacked", "remote", r.redacted)
	} else if res.Repacked {
		w.log.V(1).Info("mirror repacked", "remote", r.redacted)
	}
	w.hosts.Release(r.host, false)
	held = false
	for _, c := range commits {
		if err != nil {
			break
		}
		err = w.atHost(fctx, r.host, r.redacted, func() error {
			res, err := r.mirror.FetchCommit(fctx, auth, c)
			w.hosts.Charge(r.host, res.Requests-1)
			return err
		})
	}
	if err != nil {
		if cause := context.Cause(fctx); cause != nil && ctx.Err() == nil {
			err = fmt.Errorf("%w: %w", cause, err)
		}
		err = fmt.Errorf("watcher: fetch %s: %w", r.redacted, err)
	}
	w.rateLimited(r.host, r.redacted, err)
	w.emit(Event{Type: EventFetched, Remote: r.redacted, Duration: time.Since(start), Waited: start.Sub(queued), Err: err})
	return res, err
}

var errFetchTimeout = errors.New("watcher: fetch timed out")

// ErrFetchStalled is returned (wrapped) for a fetch that made no progress
// for Timeouts.StallAbort.
var ErrFetchStalled = errors.New("watcher: fetch stalled: no progress")

// fail reports that a target could not be brought to a commit this cycle,
// unless the remote is stopping (the failure is then ours, not the
// target's).
func (r *remote) fail(ctx context.Context, p *pollState, err error) {
	if ctx.Err() != nil {
		return
	}
	t := p.bound.target
	r.env.targetFailed(Event{Type: EventTargetFailed, Target: &t, Remote: r.redacted, Err: err})
}

// failJob is fail for a target that resolved: the event names the ref and
// the commit it was refused at (a ref that names no commit has none).
func (r *remote) failJob(ctx context.Context, j job, err error) {
	if ctx.Err() != nil {
		return
	}
	t := j.poll.bound.target
	ev := Event{Type: EventTargetFailed, Target: &t, Remote: r.redacted, Ref: j.res.Ref, Err: err}
	if !errors.Is(err, mirror.ErrNotCommit) {
		ev.Commit = j.res.Commit
	}
	r.env.targetFailed(ev)
}
