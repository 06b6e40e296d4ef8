package cluster_test

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/watcher"
)

// BenchmarkFailover crashes one of three replicas and measures the time
// from the crash to the first listing, and to the first whole poll (its
// mirror is cold there: a clone), of each of its repositories by a
// survivor, as ratios to the lease duration, and the deliveries made
// again after the takeover: none with checkpoints in ConfigMaps, every
// target of the crashed replica with checkpoints each replica keeps for
// itself. The runs are of 30 repositories (100 targets); the ConfigMap
// runs go on to the sizes of -failover-remotes beyond 30 (300: 1,000
// targets), polled every interval × remotes / 30 so that the load of
// polling stays the same.
func BenchmarkFailover(b *testing.B) {
	var sizes []int
	for _, f := range strings.Split(*failoverRemotes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		require.NoError(b, err, "-failover-remotes")
		sizes = append(sizes, n)
	}
	for _, shared := range []bool{true, false} {
		name := "configmap-checkpoints"
		if !shared {
			name = "per-replica-checkpoints"
		}
		for _, remotes := range sizes {
			if !shared && remotes > 30 {
				continue
			}
			b.Run(fmt.Sprintf("%s/remotes-%d", name, remotes), func(b *testing.B) {
				var polled, listed, first, baseline, again, fetched float64
				for range b.N {
					o := failover(b, shared, remotes)
					first += o.first
					baseline += o.baseline
					polled += o.polled
					listed += o.listed
					again += float64(o.redelivered)
					fetched += o.fetched
				}
				b.ReportMetric(first/float64(b.N), "first-listed/lease")
				b.ReportMetric(listed/float64(b.N), "listed/lease")
				b.ReportMetric(baseline/float64(b.N), "list-all/lease")
				b.ReportMetric(polled/float64(b.N), "failover/lease")
				b.ReportMetric(again/float64(b.N), "redelivered")
				b.ReportMetric(fetched/float64(b.N), "fetched/orphan")
			})
		}
	}
}

var failoverRemotes = flag.String("failover-remotes", "30,300", "BenchmarkFailover: the repositories of its runs, comma-separated")

// within reports whether ok held before limit.
func within(limit time.Duration, ok func() bool) bool {
	for start := time.Now(); !ok(); time.Sleep(50 * time.Millisecond) {
		if time.Since(start) > limit {
			return false
		}
	}
	return true
}

type takeover struct {
	// To the lease duration: the first orphan listed (the takeover seen),
	// the last listed, and the last polled (listed, fetched, checked).
	first, listed, polled float64
	// baseline is the time the bench takes to list every orphan itself,
	// as many at a time as the two survivors list (watcher.Concurrency's
	// default Lists each), the replicas running: the floor of listed -
	// first on this machine and server.
	baseline    float64
	redelivered int
	fetched     float64 // fetches of the orphans' repositories to the last orphan polled, per orphan
}

func failover(b *testing.B, shared bool, remotes int) takeover {
	ns := env.Namespace(b)
	srv := gittest.NewServer(b)
	template := srv.NewRepo(b, "template/app")
	template.Commit(b, "init", gittest.File("app.yaml", "v0"))
	var repos []*gittest.Repo
	for i := range remotes {
		repos = append(repos, template.Fork(b, fmt.Sprintf("team-%d/app", i)))
	}
	var targets []watcher.Target
	for i := range remotes * 10 / 3 {
		targets = append(targets, watcher.Target{ID: fmt.Sprintf("t-%04d", i), URL: repos[i%remotes].URL()})
	}
	every := interval * time.Duration(remotes) / 30
	l := &ledger{deliveries: map[string][]delivery{}}
	var replicas []*running
	for i := range 3 {
		var store watcher.Store
		if !shared {
			store = watcher.NewMemoryStore()
		}
		replicas = append(replicas, startReplicaWith(b, ns, fmt.Sprint("r", i), targets, l, store, every))
	}
	eventually(b, "every target delivered", 10*time.Minute, func() bool { return l.count() >= len(targets) })
	time.Sleep(2 * every)
	since := time.Now()
	time.Sleep(2 * every)
	var orphans []string
	for remote, who := range l.pollers(since) {
		if who["r1"] {
			orphans = append(orphans, remote)
		}
	}
	byURL := map[string]*gittest.Repo{}
	for _, r := range repos {
		byURL[r.URL()] = r
	}
	orphanFetches := func() (n int64) {
		for _, remote := range orphans {
			n += byURL[remote].Counts().Fetches.Load()
		}
		return n
	}
	before, fetchedBefore := l.count(), orphanFetches()
	replicas[1].cancel()
	<-replicas[1].done
	replicas[1].done <- nil
	killed := time.Now()
	all := func(by func(time.Time) map[string]map[string]bool) func() bool {
		return func() bool {
			p := by(killed)
			for _, remote := range orphans {
				if len(p[remote]) == 0 {
					return false
				}
			}
			return true
		}
	}
	if !within(10*time.Minute, all(l.listers)) {
		missing := 0
		for _, remote := range orphans {
			if len(l.listers(killed)[remote]) == 0 {
				missing++
			}
		}
		b.Fatalf("%d of %d orphans not listed by a survivor after 10m; members as r0 and r2 see them: %v, %v",
			missing, len(orphans), replicas[0].shard.Members(), replicas[2].shard.Members())
	}
	eventually(b, "the orphans polled by a survivor", 10*time.Minute, all(l.pollers))
	fetched := float64(orphanFetches()-fetchedBefore) / float64(len(orphans))
	lease := float64(leaseDuration)
	o := takeover{
		first:   float64(l.firstListed(killed, orphans).Sub(killed)) / lease,
		listed:  float64(l.lastFirst(true, killed, orphans).Sub(killed)) / lease,
		polled:  float64(l.lastFirst(false, killed, orphans).Sub(killed)) / lease,
		fetched: fetched,
	}
	o.baseline = float64(listAll(b, orphans, 2*defaultLists)) / lease
	time.Sleep(2 * every)
	o.redelivered = l.count() - before
	return o
}

// defaultLists is watcher.Concurrency's default Lists.
const defaultLists = 16

// listAll lists the refs of every remote of urls, n at a time, as a
// watcher lists a target that follows HEAD, and returns the time it took.
func listAll(b *testing.B, urls []string, n int) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	head, err := gitutil.ParseRevision("")
	require.NoError(b, err)
	sem := make(chan struct{}, n)
	errs := make(chan error, len(urls))
	var wg sync.WaitGroup
	start := time.Now()
	for _, u := range urls {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_, err := gitutil.ListRefs(ctx, u, nil, head.RefPrefixes())
			errs <- err
		})
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	for err := range errs {
		require.NoError(b, err)
	}
	return took
}

// firstListed is when the first of remotes was listed after since.
func (l *ledger) firstListed(since time.Time, remotes []string) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first time.Time
	for _, e := range l.lists {
		if e.at.After(since) && slices.Contains(remotes, e.remote) && (first.IsZero() || e.at.Before(first)) {
			first = e.at
		}
	}
	return first
}

// lastFirst is when the last of remotes was first listed (lists) or
// polled after since.
func (l *ledger) lastFirst(lists bool, since time.Time, remotes []string) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	events := l.polls
	if lists {
		events = l.lists
	}
	first := map[string]time.Time{}
	for _, e := range events {
		if e.at.After(since) && (first[e.remote].IsZero() || e.at.Before(first[e.remote])) {
			first[e.remote] = e.at
		}
	}
	var last time.Time
	for _, r := range remotes {
		if first[r].After(last) {
			last = first[r]
		}
	}
	return last
}
