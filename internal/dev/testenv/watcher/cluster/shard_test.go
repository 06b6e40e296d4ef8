package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/modwatch/modwatch/internal/dev/testenv"
	"github.com/modwatch/modwatch/watcher/cluster"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// Rendezvous hashing: a fourth member takes about a quarter of the keys,
// all from the others, and nothing else moves.
func TestOwnerMovesAboutOneNth(t *testing.T) {
	three := []string{"a", "b", "c"}
	four := append(three, "d")
	moved := 0
	const n = 3000
	for i := range n {
		key := fmt.Sprintf("https://git.example.com/org/repo-%d#id-%d", i, i%7)
		before, after := cluster.Owner(three, key), cluster.Owner(four, key)
		if before != after {
			moved++
			assert.Equal(t, "d", after, "a key moves to the new member only")
		}
	}
	assert.InDelta(t, 0.25, float64(moved)/n, 0.04, "moved %d of %d", moved, n)
	assert.Equal(t, "", cluster.Owner(nil, "k"))
}

// switchable is a transport that a test can cut, as a network partition
// cuts a replica from the apiserver.
type switchable struct {
	next http.RoundTripper
	cut  atomic.Bool
	// cutLists fails only the lists of Leases (an apiserver that times
	// out on them, while the renewal of one Lease gets through).
	cutLists atomic.Bool
}

func (s *switchable) RoundTrip(r *http.Request) (*http.Response, error) {
	if s.cut.Load() || (s.cutLists.Load() && r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/leases")) {
		return nil, errors.New("cut off")
	}
	return s.next.RoundTrip(r)
}

type replica struct {
	shard  *cluster.LeaseShard
	cancel context.CancelFunc
	done   chan struct{}
	net    *switchable
}

func startShard(t *testing.T, ns, id string, release bool) *replica {
	t.Helper()
	r := &replica{net: &switchable{}, done: make(chan struct{})}
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { r.net.next = rt; return r.net }
	client, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	r.shard, err = cluster.NewLeaseShard(client, cluster.LeaseShardConfig{
		Namespace: ns, Identity: id, LeaseDuration: 3 * time.Second, RenewPeriod: 300 * time.Millisecond,
		ReleaseOnCancel: release, Log: testr.New(t),
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { defer close(r.done); _ = r.shard.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-r.done })
	return r
}

func waitMembers(t *testing.T, r *replica, want []string, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		got := r.shard.Members()
		if assert.ObjectsAreEqual(want, got) || (len(want) == 0 && len(got) == 0) {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			t.Fatalf("members are %v after %s, not %v", got, limit, want)
		}
		select {
		case <-r.shard.Changed():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Three replicas agree on their members and split every key; one that
// crashes (its Lease kept) is dropped after the lease duration, one that
// stops cleanly (its Lease released) at once.
func TestLeaseShardMembership(t *testing.T) {
	ns := env.Namespace(t)
	a, b, c := startShard(t, ns, "a", false), startShard(t, ns, "b", false), startShard(t, ns, "c", true)
	for _, r := range []*replica{a, b, c} {
		waitMembers(t, r, []string{"a", "b", "c"}, 10*time.Second)
	}
	// Each key has one owner, once the change settled (two renew periods).
	owners := func(key string) int {
		n := 0
		for _, r := range []*replica{a, b, c} {
			if r.shard.Owns(key) {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(3 * time.Second)
	for i := range 100 {
		key := fmt.Sprint("remote-", i)
		for owners(key) != 1 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		assert.Equal(t, 1, owners(key), key)
	}

	c.cancel() // released
	<-c.done
	took := waitMembers(t, a, []string{"a", "b"}, 3*time.Second)
	assert.Less(t, took, time.Second, "a released Lease is seen gone at the next read")

	b.cancel() // a crash: the Lease stays
	<-b.done
	took = waitMembers(t, a, []string{"a"}, 6*time.Second)
	assert.Greater(t, took, 2*time.Second, "a crashed replica is alive until its lease duration passes")
	// At once, not after the settle: what the crashed replica owned, it
	// let go of when its own claim ended, before its Lease expired.
	for i := range 100 {
		assert.True(t, a.shard.Owns(fmt.Sprint("remote-", i)), "the survivor owns remote-%d as soon as the other is gone", i)
	}
}

// A replica that joins takes what a live member owned only after the
// settle (two renew periods, 600 ms here), by when that member has let go.
func TestLeaseShardJoinWaitsForTheLiveOwner(t *testing.T) {
	ns := env.Namespace(t)
	a := startShard(t, ns, "a", false)
	waitMembers(t, a, []string{"a"}, 10*time.Second)
	b := startShard(t, ns, "b", false)
	waitMembers(t, b, []string{"a", "b"}, 10*time.Second)
	seen := time.Now()
	var early []string
	moved := 0
	for i := range 100 {
		key := fmt.Sprint("remote-", i)
		if cluster.Owner([]string{"a", "b"}, key) == "b" {
			moved++
			if b.shard.Owns(key) {
				early = append(early, key)
			}
		}
	}
	require.Positive(t, moved)
	if since := time.Since(seen); since < 300*time.Millisecond { // well inside the settle
		assert.Empty(t, early, "taken from a live owner before the settle")
	} else {
		t.Logf("checked %s after the change: past half the settle, not judged", since)
	}
	require.Eventually(t, func() bool {
		for i := range 100 {
			key := fmt.Sprint("remote-", i)
			if cluster.Owner([]string{"a", "b"}, key) == "b" && !b.shard.Owns(key) {
				return false
			}
		}
		return true
	}, 3*time.Second, 20*time.Millisecond, "taken after the settle")
}

// A replica that renews its Lease but cannot read the others' keeps the
// members it saw: it does not take the others for gone, and take their
// remotes, while they are renewing. Once it reads them again, nothing
// moved.
func TestLeaseShardThatCannotReadTheOthersTakesNothing(t *testing.T) {
	ns := env.Namespace(t)
	a, b := startShard(t, ns, "a", false), startShard(t, ns, "b", false)
	waitMembers(t, a, []string{"a", "b"}, 10*time.Second)
	waitMembers(t, b, []string{"a", "b"}, 10*time.Second)
	var bs []string
	for i := range 100 {
		if key := fmt.Sprint("remote-", i); cluster.Owner([]string{"a", "b"}, key) == "b" {
			bs = append(bs, key)
		}
	}
	require.NotEmpty(t, bs)
	require.Eventually(t, func() bool { return b.shard.Owns(bs[0]) }, 3*time.Second, 20*time.Millisecond)

	a.net.cutLists.Store(true)
	deadline := time.Now().Add(3*time.Second + 4*300*time.Millisecond) // the lease duration, and more
	for time.Now().Before(deadline) {
		assert.Equal(t, []string{"a", "b"}, a.shard.Members(), "a still renews; b is not gone for it")
		for _, key := range bs {
			if !assert.False(t, a.shard.Owns(key), "b's %s, taken by a while b renews", key) {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	assert.Equal(t, []string{"a", "b"}, b.shard.Members(), "a renewed all along")
	a.net.cutLists.Store(false)
	waitMembers(t, a, []string{"a", "b"}, 3*time.Second)
	assert.True(t, b.shard.Owns(bs[0]))
}
