package cluster_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/cluster"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

const (
	leaseDuration = 3 * time.Second
	renewPeriod   = 300 * time.Millisecond
	interval      = time.Second
)

// ledger records, across replicas, who polled which remote and who
// delivered which target at which commit.
type ledger struct {
	mu         sync.Mutex
	polls      []poll
	lists      []poll                // listings of refs
	deliveries map[string][]delivery // by target
}

type poll struct {
	replica, remote string
	at              time.Time
}

type delivery struct{ replica, commit string }

func (l *ledger) observer(replica string) watcher.Observer {
	return watcher.ObserverFunc(func(e watcher.Event) {
		l.mu.Lock()
		defer l.mu.Unlock()
		switch e.Type {
		case watcher.EventPolled:
			l.polls = append(l.polls, poll{replica, e.Remote, e.Time})
		case watcher.EventListed:
			l.lists = append(l.lists, poll{replica, e.Remote, e.Time})
		case watcher.EventDelivered:
			l.deliveries[e.Target.ID] = append(l.deliveries[e.Target.ID], delivery{replica, e.Commit.String()})
		}
	})
}

// pollers returns, per remote, the replicas that polled it since.
func (l *ledger) pollers(since time.Time) map[string]map[string]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return by(l.polls, since)
}

// listers returns, per remote, the replicas that listed its refs since.
func (l *ledger) listers(since time.Time) map[string]map[string]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return by(l.lists, since)
}

func by(polls []poll, since time.Time) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, p := range polls {
		if p.at.After(since) {
			if out[p.remote] == nil {
				out[p.remote] = map[string]bool{}
			}
			out[p.remote][p.replica] = true
		}
	}
	return out
}

func (l *ledger) delivered(id, commit string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, d := range l.deliveries[id] {
		if d.commit == commit {
			out = append(out, d.replica)
		}
	}
	return out
}

func (l *ledger) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, ds := range l.deliveries {
		n += len(ds)
	}
	return n
}

type running struct {
	id     string
	shard  *cluster.LeaseShard
	cancel context.CancelFunc
	done   chan error
}

// startReplica runs a watcher with a Lease shard and the checkpoints in
// ConfigMaps, as a controller's replica does.
func startReplica(t testing.TB, ns, id string, targets []watcher.Target, l *ledger) *running {
	return startReplicaWith(t, ns, id, targets, l, nil, interval)
}

// startReplicaWith is startReplica with another store (nil: the ConfigMaps)
// and poll interval.
func startReplicaWith(t testing.TB, ns, id string, targets []watcher.Target, l *ledger, store watcher.Store, interval time.Duration) *running {
	t.Helper()
	shard, err := cluster.NewLeaseShard(env.Kube, cluster.LeaseShardConfig{
		Namespace: ns, Identity: id, LeaseDuration: leaseDuration, RenewPeriod: renewPeriod, Log: logr.Discard(),
	})
	require.NoError(t, err)
	if store == nil {
		store, err = cluster.NewConfigMapStore(env.Kube, cluster.ConfigMapStoreConfig{Namespace: ns})
		require.NoError(t, err)
	}
	w := watcher.New(watcher.WithCacheDir(t.TempDir()), watcher.WithShard(shard), watcher.WithStore(store),
		watcher.WithInterval(interval), watcher.WithMinInterval(interval), watcher.WithJitter(0),
		watcher.WithObserver(l.observer(id)), watcher.WithRetryBackoff(watcher.Backoff{Min: 50 * time.Millisecond, Max: time.Second}))
	require.NoError(t, w.Route(watchertest.NewSource(targets...), watchertest.NewSink("apply")))
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{id: id, shard: shard, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-r.done })
	return r
}

func eventually(t testing.TB, what string, limit time.Duration, ok func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !ok() {
		if time.Since(start) > limit {
			t.Fatalf("not %s after %s", what, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

// Three replicas, 300 targets on 30 repositories: each remote is polled by
// one replica and each target delivered once; a replica that crashes has
// its remotes taken over within the lease duration and an interval, a push
// made meanwhile is delivered once, and nothing delivered before is
// delivered again. A fourth replica takes about a quarter of the remotes
// first.
func TestReplicasShareRemotes(t *testing.T) {
	ns := env.Namespace(t)
	srv := gittest.NewServer(t)
	var repos []*gittest.Repo
	var heads []string
	for i := range 30 {
		r := srv.NewRepo(t, fmt.Sprintf("team-%d/app", i))
		heads = append(heads, r.Commit(t, "init", gittest.File("app.yaml", "v0")))
		repos = append(repos, r)
	}
	var targets []watcher.Target
	for i := range 300 {
		targets = append(targets, watcher.Target{ID: fmt.Sprintf("gitsync-%03d", i), URL: repos[i%30].URL()})
	}
	l := &ledger{deliveries: map[string][]delivery{}}
	replicas := []*running{startReplica(t, ns, "r0", targets, l), startReplica(t, ns, "r1", targets, l), startReplica(t, ns, "r2", targets, l)}

	eventually(t, "every target delivered", time.Minute, func() bool { return l.count() >= 300 })
	time.Sleep(2 * interval) // a few cycles more, to see no second delivery
	for i, tg := range targets {
		assert.Len(t, l.delivered(tg.ID, heads[i%30]), 1, "%s delivered once", tg.ID)
	}
	since := time.Now()
	time.Sleep(3 * interval)
	// At least three intervals, and until every remote has been polled
	// once: on a busy machine a poll can start past the window.
	eventually(t, "every remote polled", time.Minute, func() bool { return len(l.pollers(since)) == 30 })
	owner := map[string]string{} // remote → replica
	for remote, who := range l.pollers(since) {
		require.Len(t, who, 1, "%s polled by %v", remote, who)
		for id := range who {
			owner[remote] = id
		}
	}
	require.Len(t, owner, 30, "every remote is polled")

	// A fourth replica: about a quarter of the remotes move to it, the
	// others keep their owner.
	replicas = append(replicas, startReplica(t, ns, "r3", targets, l))
	eventually(t, "r3 a member", 10*time.Second, func() bool { return len(replicas[0].shard.Members()) == 4 })
	time.Sleep(2 * interval) // the moved remotes' last polls by their old owners end
	since = time.Now()
	time.Sleep(3 * interval)
	eventually(t, "every remote polled after r3 joined", time.Minute, func() bool { return len(l.pollers(since)) == 30 })
	moved := 0
	after := l.pollers(since)
	require.Len(t, after, 30)
	members := []string{"r0", "r1", "r2", "r3"}
	for remote, who := range after {
		require.Len(t, who, 1, "%s polled by %v", remote, who)
		ep, err := gitutil.ParseURL(remote)
		require.NoError(t, err)
		want := cluster.Owner(members, ep.Key()+"#anonymous")
		assert.True(t, who[want], "%s polled by %v, owned by %s", remote, who, want)
		if who["r3"] {
			moved++
		} else {
			assert.True(t, who[owner[remote]], "%s keeps its owner %s", remote, owner[remote])
		}
		for id := range who {
			owner[remote] = id
		}
	}
	// About a quarter in expectation (rendezvous hashing, see
	// TestOwnerMovesAboutOneNth); 30 remotes are too few to bound it tightly.
	t.Logf("%d of 30 remotes moved to the fourth replica", moved)
	assert.Equal(t, 300, l.count(), "a move delivers nothing again")

	// r1 crashes: its context ends, its Lease stays.
	victim := replicas[1]
	victim.cancel()
	require.NoError(t, <-victim.done)
	victim.done <- nil // for the cleanup
	killed := time.Now()
	var orphans []int
	for i, r := range repos {
		if owner[r.URL()] == "r1" {
			orphans = append(orphans, i)
			heads[i] = r.Commit(t, "pushed during the outage", gittest.File("app.yaml", "v1"))
		}
	}
	require.NotEmpty(t, orphans)
	took := eventually(t, "the orphans polled by a survivor", leaseDuration+2*interval+renewPeriod, func() bool {
		p := l.pollers(killed)
		for _, i := range orphans {
			if len(p[repos[i].URL()]) == 0 {
				return false
			}
		}
		return true
	})
	t.Logf("failover: %s for a lease duration of %s (%.2f×)", took, leaseDuration, float64(took)/float64(leaseDuration))
	eventually(t, "the outage's pushes delivered", time.Minute, func() bool {
		for i, tg := range targets {
			if len(l.delivered(tg.ID, heads[i%30])) == 0 {
				return false
			}
		}
		return true
	})
	time.Sleep(2 * interval)
	for i, tg := range targets {
		assert.Len(t, l.delivered(tg.ID, heads[i%30]), 1, "%s delivered once", tg.ID)
	}
	assert.Equal(t, 300+10*len(orphans), l.count(), "nothing delivered again after the takeover")
	since = time.Now()
	time.Sleep(3 * interval)
	for remote, who := range l.pollers(since) {
		assert.Len(t, who, 1, "%s polled by %v after the takeover", remote, who)
		assert.False(t, who["r1"])
	}
}
