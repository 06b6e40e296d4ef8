package cluster

import (
	"testing"
	"time"
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
