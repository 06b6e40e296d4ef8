package cluster

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// A replica reads the Leases again when the first other member would
// expire, not at the tick after: nextExpiry names that moment, and leaves
// out itself and the members already gone.
func TestNextExpiryIsTheFirstOtherMemberToLapse(t *testing.T) {
	s, err := NewLeaseShard(nil, LeaseShardConfig{Namespace: "ns", Identity: "a", LeaseDuration: 3 * time.Second, RenewPeriod: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.nextExpiry(); got != 0 {
		t.Fatalf("no member seen: nextExpiry = %s, want 0", got)
	}
	now := time.Now()
	s.observedAt = now
	s.seen = map[string]observed{
		"modwatch-a": {holder: "a", at: now.Add(-2900 * time.Millisecond)}, // itself
		"modwatch-b": {holder: "b", at: now.Add(-1 * time.Second)},
		"modwatch-c": {holder: "c", at: now.Add(-2 * time.Second)}, // first to lapse: in 1s
		"modwatch-d": {holder: "d", at: now.Add(-5 * time.Second)}, // gone already
	}
	got := s.nextExpiry()
	if elapsed := time.Since(now); got > time.Second || got < time.Second-elapsed-time.Millisecond {
		t.Fatalf("nextExpiry = %s, want c's expiry, 1s from the read (%s ago)", got, elapsed)
	}
	delete(s.seen, "modwatch-b")
	delete(s.seen, "modwatch-c")
	if got := s.nextExpiry(); got != 0 {
		t.Fatalf("only itself and a gone member: nextExpiry = %s, want 0", got)
	}
}

// When another member is due to expire, the replica reads the Leases at
// once, without renewing its own first (its ticks renew it): the read that
// finds the member gone is the wake's first request.
func TestAnExpiryWakeReadsBeforeItRenews(t *testing.T) {
	g := newGroupWithB(t)
	// b is seen at the first read and never renews: it expires 2.5s later,
	// halfway between two of a's ticks.
	s := g.run(t, 2500*time.Millisecond, time.Second, logr.Discard())
	waitFor(t, "b taken for gone", func() bool {
		return slices.Equal(s.Members(), []string{"a"}) && slices.Contains(membersSeen(s), "b")
	})
	if verbs := g.requests(0); len(verbs) < 2 || verbs[len(verbs)-1] != "list" || verbs[len(verbs)-2] != "list" {
		t.Fatalf("requests %v: want the tick's read, then the wake's read alone", verbs)
	}
}

// membersSeen is every holder s has seen.
func membersSeen(s *LeaseShard) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var hs []string
	for _, o := range s.seen {
		hs = append(hs, o.holder)
	}
	return hs
}

// groupWithB is a fake clientset holding member b's Lease, which records
// the requests (but the watches) made to it.
type groupWithB struct {
	client *fake.Clientset
	mu     sync.Mutex
	verbs  []string
}

func newGroupWithB(t *testing.T) *groupWithB {
	t.Helper()
	g := &groupWithB{client: fake.NewClientset()}
	g.client.PrependReactor("*", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.verbs = append(g.verbs, a.GetVerb())
		return false, nil, nil
	})
	b, now := "b", metav1.NewMicroTime(time.Now())
	secs := int32(2)
	_, err := g.client.CoordinationV1().Leases("ns").Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "g-b", Namespace: "ns", Labels: map[string]string{LabelGroup: "g"}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &b, LeaseDurationSeconds: &secs, RenewTime: &now},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// requests returns the requests made after the first from.
func (g *groupWithB) requests(from int) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.verbs[from:])
}

// run runs replica a of the group until the test ends.
func (g *groupWithB) run(t *testing.T, lease, renew time.Duration, log logr.Logger) *LeaseShard {
	t.Helper()
	s, err := NewLeaseShard(g.client, LeaseShardConfig{Namespace: "ns", Group: "g", Identity: "a",
		LeaseDuration: lease, RenewPeriod: renew, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return s
}

// waitFor polls ok for 10s at most.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
	}
}

// runSeeingB runs replica a with a RenewPeriod of an hour, so that it
// reads the Leases once in the test, and waits until it has seen b.
func (g *groupWithB) runSeeingB(t *testing.T) *LeaseShard {
	t.Helper()
	s := g.run(t, 2*time.Hour, time.Hour, logr.Discard())
	waitFor(t, "a sees b", func() bool { return slices.Equal(s.Members(), []string{"a", "b"}) })
	return s
}

// A renewal counts from when it was made, not from the next read of the
// Leases an hour later: the watch records it, without a request.
func TestARenewalIsSeenWhenItIsMade(t *testing.T) {
	g := newGroupWithB(t)
	s := g.runSeeingB(t)
	before := len(g.requests(0))
	leases := g.client.CoordinationV1().Leases("ns")
	waitFor(t, "b's renewal seen", func() bool {
		// Renewed again until seen: the watch may start after the first.
		l, err := leases.Get(context.Background(), "g-b", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		renewed := time.Now()
		l.Spec.RenewTime = &metav1.MicroTime{Time: renewed}
		if _, err := leases.Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		s.mu.Lock()
		defer s.mu.Unlock()
		o := s.seen["g-b"]
		return o.renew == renewed.UTC().Format(time.RFC3339Nano) && !o.at.Before(renewed)
	})
	if after := g.requests(before); slices.Contains(after, "list") {
		t.Fatalf("requests after a saw b: %v; want the watch alone to see the renewal", after)
	}
}

// A member that releases its Lease (deletes it, as ReleaseOnCancel does)
// leaves the members at once, not at the next read.
func TestAReleasedLeaseLeavesTheMembersAtOnce(t *testing.T) {
	g := newGroupWithB(t)
	// The watch is the test's own, so that the release is sent on it once
	// it is open (the fake clientset's own misses what comes before).
	watches := make(chan *watch.RaceFreeFakeWatcher, 1)
	g.client.PrependWatchReactor("leases", func(k8stesting.Action) (bool, watch.Interface, error) {
		w := watch.NewRaceFreeFake()
		select {
		case watches <- w:
		default: // a watch opened again: not the test's
		}
		return true, w, nil
	})
	s := g.runSeeingB(t)
	var w *watch.RaceFreeFakeWatcher
	select {
	case w = <-watches:
	case <-time.After(10 * time.Second):
		t.Fatal("the Leases not watched within 10s")
	}
	l, err := g.client.CoordinationV1().Leases("ns").Get(context.Background(), "g-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.Delete(l)
	waitFor(t, "b released", func() bool { return slices.Equal(s.Members(), []string{"a"}) })
}

// A replica not allowed to watch the Leases works on its reads, and says
// so once, not at every retry of the watch.
func TestAReplicaThatCannotWatchReadsAndSaysSoOnce(t *testing.T) {
	g := newGroupWithB(t)
	var mu sync.Mutex
	var watches int
	g.client.PrependWatchReactor("leases", func(k8stesting.Action) (bool, watch.Interface, error) {
		mu.Lock()
		defer mu.Unlock()
		watches++
		return true, nil, apierrors.NewForbidden(coordinationv1.Resource("leases"), "", errors.New("no watch verb"))
	})
	var logged []string
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		logged = append(logged, args)
	}, funcr.Options{})
	s := g.run(t, 2*time.Second, 50*time.Millisecond, log)
	waitFor(t, "a sees b and retries the watch", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Equal(s.Members(), []string{"a", "b"}) && watches >= 3
	})
	mu.Lock()
	defer mu.Unlock()
	n := 0
	for _, l := range logged {
		if strings.Contains(l, "no watch verb") {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("the watch's failure logged %d times in %d tries, want once: %q", n, watches, logged)
	}
}

// A watch that ends as soon as it opens (a proxy that closes it) is opened
// again after a backoff, not at once in a loop, and said so once. (Fake
// time in a synctest bubble: the reopenings are timed exactly; in a loop,
// fake time never moves and the test times out.)
func TestAWatchThatEndsAtOnceIsNotReopenedInALoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGroupWithB(t)
		var mu sync.Mutex
		var opened []time.Time
		g.client.PrependWatchReactor("leases", func(k8stesting.Action) (bool, watch.Interface, error) {
			mu.Lock()
			opened = append(opened, time.Now())
			mu.Unlock()
			w := watch.NewFake()
			w.Stop()
			return true, w, nil
		})
		var logged atomic.Int64
		log := funcr.New(func(_, args string) {
			if strings.Contains(args, "as soon as it opened") {
				logged.Add(1)
			}
		}, funcr.Options{})
		g.run(t, 2*time.Second, 50*time.Millisecond, log)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		// Fake time: a backoff from RenewPeriod doubling to LeaseDuration;
		// at once in a loop, every watch in the first instant.
		want := []int64{50, 100, 200, 400, 800, 1600, 2000, 2000, 2000}
		var gaps []int64
		for k := 1; k < len(opened) && k <= len(want); k++ {
			gaps = append(gaps, opened[k].Sub(opened[k-1]).Milliseconds())
		}
		if !slices.Equal(gaps, want) {
			t.Errorf("watches %d, reopened after %v ms, want %v ms", len(opened), gaps, want)
		}
		if n := logged.Load(); n != 1 {
			t.Errorf("logged %d times, want once", n)
		}
	})
}

// The shard's log is the program's code, and may read the shard: it runs
// with no lock of the shard held (it deadlocked the replica once: CI,
// stop 63, a test's logger and its reader taking their locks in turns).
func TestALoggerThatReadsTheShardDoesNotDeadlockIt(t *testing.T) {
	g := newGroupWithB(t)
	var shard atomic.Pointer[LeaseShard]
	var read atomic.Int64
	log := funcr.New(func(string, string) {
		if s := shard.Load(); s != nil {
			s.Members()
			read.Add(1)
		}
	}, funcr.Options{})
	s, err := NewLeaseShard(g.client, LeaseShardConfig{Namespace: "ns", Group: "g", Identity: "a",
		LeaseDuration: 2 * time.Hour, RenewPeriod: time.Hour, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	shard.Store(s)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	seen := false
	for deadline := time.Now().Add(10 * time.Second); !seen && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		seen = read.Load() > 0 && slices.Equal(s.Members(), []string{"a", "b"})
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the replica did not stop within 10s of its cancel: deadlocked in its log")
	}
	if !seen {
		t.Fatal("a did not see b within 10s, its logger reading it")
	}
}
