package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/modwatch/modwatch/watcher"
)

// LabelGroup labels the membership Leases of a group.
const LabelGroup = "modwatch.io/shard-group"

// LeaseShardConfig configures a [LeaseShard].
type LeaseShardConfig struct {
	// Namespace holds the Leases.
	Namespace string
	// Group names the replicas that share targets ("modwatch" by default):
	// the Leases are "<Group>-<Identity>", labelled [LabelGroup]=<Group>.
	Group string
	// Identity names this replica, unique in the group (the pod's name).
	Identity string
	// LeaseDuration is how long a replica that stopped renewing its Lease
	// is taken for alive: its remotes move to the others after it, counted
	// from its last renewal as the others' watch of the Leases saw it (from
	// their next read, up to a RenewPeriod later, while they cannot watch
	// them). Default 15s.
	LeaseDuration time.Duration
	// RenewPeriod is how often the Lease is renewed and the others' read.
	// Default LeaseDuration/5.
	RenewPeriod time.Duration
	// ReleaseOnCancel deletes the Lease when Run ends, so that the others
	// take the remotes over at once (a rolling update) rather than after
	// LeaseDuration (a crash). As client-go's leader election, off by
	// default; set it when the process ends with Run.
	ReleaseOnCancel bool
	// Log receives membership changes.
	Log logr.Logger
}

// LeaseShard is a [watcher.Shard] over Kubernetes Leases. Run it (the
// watcher does when given it with [watcher.WithShard]).
//
// Fencing: a replica owns nothing once its last successful renewal is
// older than LeaseDuration - RenewPeriod, and the others take it for gone
// only when they have seen no renewal for LeaseDuration; so a replica that
// cannot renew (cut off from the apiserver, or stalled) stops polling
// before another starts, by RenewPeriod at least. When the members change
// (a replica joins, leaves or dies), a replica gives up the remotes it
// loses at once and takes those it gains two RenewPeriods later, by when a
// previous owner that is alive has seen the change and let go: the
// watcher stops that remote's poller and cancels the deliveries it had
// offered, so no target is delivered by two replicas at once. A member is
// taken for gone only by a read of the Leases that found it unrenewed for
// LeaseDuration: a replica that renews but cannot read the others keeps
// the members it last saw.
type LeaseShard struct {
	cfg    LeaseShardConfig
	client kubernetes.Interface
	name   string // of its own Lease

	mu      sync.Mutex
	members []string // live, sorted
	fresh   bool     // its own claim holds
	// Until settle, a remote is owned only if it was under before too, or
	// its owner under before is no longer a member: a replica gives up what
	// it loses at once, takes what an expired (or released) member had at
	// once — that member's own claim ended before its Lease did, so it has
	// let go — and what a live member had two renew periods after it saw
	// the change, by when that member has seen it too and let go.
	before    []string
	settle    time.Time
	lastRenew time.Time
	// observedAt is when the group's Leases were last read. A member is
	// gone when that read found its Lease unrenewed for LeaseDuration: a
	// replica that cannot read the Leases (the list fails or times out)
	// keeps the members it saw rather than take the others for gone while
	// they may be renewing, and until its first read it owns nothing.
	observedAt time.Time
	seen       map[string]observed // by Lease name
	changed    chan struct{}
}

// observed is when a member's Lease was last seen renewed, on this
// replica's clock (another's clock may be skewed; its renewals are not).
type observed struct {
	holder string
	renew  string
	at     time.Time
}

var (
	_ watcher.Shard    = (*LeaseShard)(nil)
	_ watcher.Runnable = (*LeaseShard)(nil)
)

// NewLeaseShard checks cfg and returns a shard that owns nothing until it
// has run once.
func NewLeaseShard(client kubernetes.Interface, cfg LeaseShardConfig) (*LeaseShard, error) {
	if cfg.Group == "" {
		cfg.Group = "modwatch"
	}
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration = 15 * time.Second
	}
	if cfg.RenewPeriod <= 0 {
		cfg.RenewPeriod = cfg.LeaseDuration / 5
	}
	if cfg.RenewPeriod*2 > cfg.LeaseDuration {
		return nil, fmt.Errorf("cluster: RenewPeriod %s must be at most half of LeaseDuration %s", cfg.RenewPeriod, cfg.LeaseDuration)
	}
	if cfg.Namespace == "" || cfg.Identity == "" {
		return nil, errors.New("cluster: a lease shard needs a namespace and an identity")
	}
	name := cfg.Group + "-" + cfg.Identity
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return nil, fmt.Errorf("cluster: lease name %q: %v", name, errs)
	}
	if errs := validation.IsValidLabelValue(cfg.Group); len(errs) > 0 {
		return nil, fmt.Errorf("cluster: group %q: %v", cfg.Group, errs)
	}
	return &LeaseShard{cfg: cfg, client: client, name: name, seen: map[string]observed{}, changed: make(chan struct{})}, nil
}

// Owns implements watcher.Shard: this replica's claim holds and the
// remote's rendezvous hash is highest for it among the live members.
func (s *LeaseShard) Owns(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.fresh || Owner(s.members, key) != s.cfg.Identity {
		return false
	}
	if !time.Now().Before(s.settle) {
		return true
	}
	prev := Owner(s.before, key)
	return prev == s.cfg.Identity || (prev != "" && !slices.Contains(s.members, prev))
}

// Changed implements watcher.Shard.
func (s *LeaseShard) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// Members returns the live members, sorted; empty while this replica's
// own claim does not hold.
func (s *LeaseShard) Members() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.fresh {
		return nil
	}
	return slices.Clone(s.members)
}

// Owner is the member that owns key by rendezvous (highest random weight)
// hashing: adding or removing a member moves only the keys it wins or
// held. "" when there is no member.
func Owner(members []string, key string) string {
	best, owner := uint64(0), ""
	for _, m := range members {
		sum := sha256.Sum256([]byte(m + "\x00" + key))
		if w := binary.BigEndian.Uint64(sum[:8]); owner == "" || w > best || (w == best && m < owner) {
			best, owner = w, m
		}
	}
	return owner
}

// Run renews this replica's Lease and reads the group's until ctx ends.
// Between reads it watches the group's Leases, so that a renewal counts
// from when it was made rather than from the next read: a member that
// stops renewing is taken for gone LeaseDuration after its last renewal,
// not up to a RenewPeriod later. A read still decides that a member is
// gone, and without the watch (it fails, or is not allowed) the reads
// alone do what they did.
func (s *LeaseShard) Run(ctx context.Context) error {
	tick := time.NewTicker(s.cfg.RenewPeriod)
	defer tick.Stop()
	lapse := time.NewTimer(time.Hour)
	defer lapse.Stop()
	settled := time.NewTimer(time.Hour)
	defer settled.Stop()
	expiry := time.NewTimer(time.Hour)
	defer expiry.Stop()
	watched := make(chan struct{}, 1)
	wctx, stopWatch := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { s.watch(wctx, watched) })
	defer wg.Wait()
	defer stopWatch()
	renew, read := true, true
	for {
		if renew {
			s.renew(ctx)
		}
		if read {
			s.observe(ctx)
		}
		renew, read = true, true
		holds, settle := s.recompute()
		if holds > 0 {
			lapse.Reset(holds)
		}
		if settle > 0 {
			settled.Reset(settle)
		}
		if e := s.nextExpiry(); e > 0 {
			expiry.Reset(e)
		}
		select {
		case <-ctx.Done():
			s.stop()
			return nil
		case <-tick.C:
		case <-lapse.C:
			// The claim lapses now, between two ticks: stop owning at once.
		case <-settled.C:
			s.notify() // what was gained is owned now
		case <-expiry.C:
			// A member expires now unless it renewed: read the Leases at
			// once rather than at the next tick, which may be up to a
			// RenewPeriod later; the tick renews.
			renew = false
		case <-watched:
			// The watch saw a Lease change: derive the members and the
			// next expiry again, without a request.
			renew, read = false, false
		}
	}
}

// nextExpiry is how long from now until the first live member but this
// replica is gone, unless a read of the Leases finds it renewed (see
// recompute); 0 when there is none to wait for.
func (s *LeaseShard) nextExpiry() time.Duration {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var first time.Duration
	for _, o := range s.seen {
		if o.holder == s.cfg.Identity || s.observedAt.Sub(o.at) >= s.cfg.LeaseDuration {
			continue // itself, or gone already
		}
		if d := o.at.Add(s.cfg.LeaseDuration).Sub(now); d > 0 && (first == 0 || d < first) {
			first = d
		}
	}
	return first
}

// renew creates or renews this replica's Lease, recording when a renewal
// that succeeded was sent.
func (s *LeaseShard) renew(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RenewPeriod)
	defer cancel()
	sent := time.Now()
	leases := s.client.CoordinationV1().Leases(s.cfg.Namespace)
	now := metav1.NewMicroTime(sent)
	secs := int32(s.cfg.LeaseDuration / time.Second)
	l, err := leases.Get(ctx, s.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		l = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: s.cfg.Namespace, Labels: map[string]string{LabelGroup: s.cfg.Group}},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: &s.cfg.Identity, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now,
			},
		}
		_, err = leases.Create(ctx, l, metav1.CreateOptions{})
	case err == nil:
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != s.cfg.Identity {
			err = fmt.Errorf("lease %s is held by %v, not %s: two replicas share an identity", s.name, deref(l.Spec.HolderIdentity), s.cfg.Identity)
			break
		}
		l.Spec.RenewTime, l.Spec.LeaseDurationSeconds = &now, &secs
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil {
		if ctx.Err() == nil {
			s.cfg.Log.Error(err, "renew membership lease", "lease", s.name)
		}
		return
	}
	s.mu.Lock()
	s.lastRenew = sent
	s.mu.Unlock()
}

// observe reads the group's Leases and records which were renewed.
func (s *LeaseShard) observe(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RenewPeriod)
	defer cancel()
	list, err := s.client.CoordinationV1().Leases(s.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelGroup + "=" + s.cfg.Group})
	if err != nil {
		if ctx.Err() == nil {
			s.cfg.Log.Error(err, "read membership leases")
		}
		return
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.observedAt = now
	present := map[string]bool{}
	for _, l := range list.Items {
		if l.Spec.HolderIdentity == nil || l.Spec.RenewTime == nil {
			continue
		}
		present[l.Name] = true
		holder, renew := *l.Spec.HolderIdentity, l.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
		if o, ok := s.seen[l.Name]; !ok || o.renew != renew || o.holder != holder {
			s.seen[l.Name] = observed{holder: holder, renew: renew, at: now}
		}
	}
	for name := range s.seen {
		if !present[name] {
			delete(s.seen, name) // released
		}
	}
}

// watch follows the group's Leases until ctx ends, recording each
// renewal, release and new member as it is seen and waking Run on it. A
// watch that fails, or ends sooner than a RenewPeriod after it opened, is
// opened again after a backoff, from RenewPeriod to LeaseDuration.
func (s *LeaseShard) watch(ctx context.Context, wake chan<- struct{}) {
	leases := s.client.CoordinationV1().Leases(s.cfg.Namespace)
	backoff := s.cfg.RenewPeriod
	for ctx.Err() == nil {
		timeout := int64(watchTimeout / time.Second)
		opened := time.Now()
		w, err := leases.Watch(ctx, metav1.ListOptions{LabelSelector: LabelGroup + "=" + s.cfg.Group, TimeoutSeconds: &timeout})
		if err == nil {
			err = s.follow(ctx, w, wake)
			w.Stop()
			if err == nil && time.Since(opened) >= s.cfg.RenewPeriod {
				backoff = s.cfg.RenewPeriod
				continue
			}
			if err == nil {
				err = errors.New("the watch ended as soon as it opened")
			}
		}
		if ctx.Err() != nil {
			return
		}
		if backoff == s.cfg.RenewPeriod { // the first failure in a row
			s.cfg.Log.Error(err, "watch membership leases; the reads go on alone until it is back", "retry", backoff)
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, s.cfg.LeaseDuration)
	}
}

// watchTimeout is how long the apiserver keeps one watch of the Leases
// open; it is opened again at once after.
const watchTimeout = 5 * time.Minute

// follow records the events of w until it ends: nil, or the error it
// ended with.
func (s *LeaseShard) follow(ctx context.Context, w watch.Interface, wake chan<- struct{}) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil
			}
			if ev.Type == watch.Error {
				return fmt.Errorf("watch of the membership leases: %w", apierrors.FromObject(ev.Object))
			}
			if s.saw(ev) {
				select {
				case wake <- struct{}{}:
				default: // a wake is pending already
				}
			}
		}
	}
}

// saw records a watched Lease event as the reads record what they find,
// and reports whether it changed what this replica knows.
func (s *LeaseShard) saw(ev watch.Event) bool {
	l, ok := ev.Object.(*coordinationv1.Lease)
	if !ok {
		return false
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	o, had := s.seen[l.Name]
	if ev.Type == watch.Deleted || l.Spec.HolderIdentity == nil || l.Spec.RenewTime == nil {
		delete(s.seen, l.Name) // released, as a read finds it
		return had
	}
	holder, renew := *l.Spec.HolderIdentity, l.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
	if had && o.renew == renew && o.holder == holder {
		return false
	}
	s.seen[l.Name] = observed{holder: holder, renew: renew, at: now}
	return true
}

// notify tells the watcher to ask Owns again.
func (s *LeaseShard) notify() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.changed)
	s.changed = make(chan struct{})
}

// recompute derives the live members and whether this replica's claim
// holds, tells the watcher when either changed, and returns how long the
// claim holds from now (0: it does not) and how long until what it gained
// in a change is owned (0: nothing pending).
func (s *LeaseShard) recompute() (holds, settle time.Duration) {
	now := time.Now()
	var changed bool
	var live []string
	// The log is the program's code: it runs after the lock is let go, so
	// a logger that reads the shard (Members) cannot deadlock on it.
	defer func() {
		if changed {
			s.cfg.Log.Info("shard membership", "identity", s.cfg.Identity, "members", live, "claim", holds > 0)
		}
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range s.seen {
		if s.observedAt.Sub(o.at) < s.cfg.LeaseDuration {
			live = append(live, o.holder)
		}
	}
	holds = s.cfg.LeaseDuration - s.cfg.RenewPeriod - now.Sub(s.lastRenew)
	fresh := !s.lastRenew.IsZero() && holds > 0 && !s.observedAt.IsZero()
	if fresh && !slices.Contains(live, s.cfg.Identity) {
		live = append(live, s.cfg.Identity) // renewed, not listed yet
	}
	slices.Sort(live)
	live = slices.Compact(live)
	if fresh != s.fresh || !slices.Equal(live, s.members) {
		changed = true
		if !now.Before(s.settle) {
			// Who owned what: kept while an earlier change settles. A
			// replica without a claim owned nothing, so what it gains waits
			// for the settle unless its owner left.
			s.before = s.members
			if !s.fresh {
				s.before = slices.DeleteFunc(slices.Clone(s.members), func(m string) bool { return m == s.cfg.Identity })
			}
		}
		s.settle = now.Add(2 * s.cfg.RenewPeriod)
		s.fresh, s.members = fresh, live
		close(s.changed)
		s.changed = make(chan struct{})
	}
	if now.Before(s.settle) {
		settle = s.settle.Sub(now)
	}
	if !fresh {
		return 0, settle
	}
	return holds, settle
}

// stop gives up the claim and, with ReleaseOnCancel, the Lease.
func (s *LeaseShard) stop() {
	s.mu.Lock()
	s.fresh, s.lastRenew, s.before = false, time.Time{}, nil
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	if !s.cfg.ReleaseOnCancel {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RenewPeriod)
	defer cancel()
	if err := s.client.CoordinationV1().Leases(s.cfg.Namespace).Delete(ctx, s.name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		s.cfg.Log.Error(err, "release membership lease", "lease", s.name)
	}
}

func deref(p *string) string {
	if p == nil {
		return "<nobody>"
	}
	return *p
}

// Sharded returns what a replica that shares the repositories with the
// others needs: a LeaseShard with cfg (for watcher.WithShard), and the
// store of the checkpoints the replicas share, in ConfigMaps of
// cfg.Namespace named after prefix (see [ConfigMapStoreConfig]), for where
// the program puts its store.
func Sharded(client kubernetes.Interface, cfg LeaseShardConfig, prefix string) (*LeaseShard, *ConfigMapStore, error) {
	shard, err := NewLeaseShard(client, cfg)
	if err != nil {
		return nil, nil, err
	}
	store, err := NewConfigMapStore(client, ConfigMapStoreConfig{Namespace: cfg.Namespace, Prefix: prefix})
	if err != nil {
		return nil, nil, err
	}
	return shard, store, nil
}
