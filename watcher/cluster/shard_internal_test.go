package cluster

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
	client := fake.NewClientset()
	var mu sync.Mutex
	var verbs []string
	client.PrependReactor("*", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		verbs = append(verbs, a.GetVerb())
		return false, nil, nil
	})
	b, now := "b", metav1.NewMicroTime(time.Now())
	secs := int32(2)
	_, err := client.CoordinationV1().Leases("ns").Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "g-b", Namespace: "ns", Labels: map[string]string{LabelGroup: "g"}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &b, LeaseDurationSeconds: &secs, RenewTime: &now},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// b is seen at the first read and never renews: it expires 2.5s later,
	// halfway between two of a's ticks.
	s, err := NewLeaseShard(client, LeaseShardConfig{Namespace: "ns", Group: "g", Identity: "a",
		LeaseDuration: 2500 * time.Millisecond, RenewPeriod: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Equal(s.Members(), []string{"a"}) || !slices.Contains(membersSeen(s), "b") {
		if time.Now().After(deadline) {
			t.Fatalf("b not taken for gone: members %v", s.Members())
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := len(verbs); n < 2 || verbs[n-1] != "list" || verbs[n-2] != "list" {
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
