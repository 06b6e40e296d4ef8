package cluster_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/modwatch/modwatch/internal/gittest"
	"github.com/modwatch/modwatch/watcher"
)

// BenchmarkFailover crashes one of three replicas sharing 30 repositories
// (100 targets) and measures the time from the crash to the first poll of
// each of its repositories by a survivor, as a ratio to the lease
// duration, and the deliveries made again after the takeover: none with
// checkpoints in ConfigMaps, every target of the crashed replica with
// checkpoints each replica keeps for itself.
func BenchmarkFailover(b *testing.B) {
	for _, shared := range []bool{true, false} {
		name := "configmap-checkpoints"
		if !shared {
			name = "per-replica-checkpoints"
		}
		b.Run(name, func(b *testing.B) {
			var ratio, again float64
			for range b.N {
				r, n := failover(b, shared)
				ratio += r
				again += float64(n)
			}
			b.ReportMetric(ratio/float64(b.N), "failover/lease")
			b.ReportMetric(again/float64(b.N), "redelivered")
		})
	}
}

func failover(b *testing.B, shared bool) (ratio float64, redelivered int) {
	ns := env.Namespace(b)
	srv := gittest.NewServer(b)
	var repos []*gittest.Repo
	for i := range 30 {
		r := srv.NewRepo(b, fmt.Sprintf("team-%d/app", i))
		r.Commit(b, "init", gittest.File("app.yaml", "v0"))
		repos = append(repos, r)
	}
	var targets []watcher.Target
	for i := range 100 {
		targets = append(targets, watcher.Target{ID: fmt.Sprintf("t-%03d", i), URL: repos[i%30].URL()})
	}
	l := &ledger{deliveries: map[string][]delivery{}}
	var replicas []*running
	for i := range 3 {
		var store watcher.Store
		if !shared {
			store = watcher.NewMemoryStore()
		}
		replicas = append(replicas, startReplicaWith(b, ns, fmt.Sprint("r", i), targets, l, store))
	}
	eventually(b, "every target delivered", time.Minute, func() bool { return l.count() >= 100 })
	time.Sleep(2 * interval)
	since := time.Now()
	time.Sleep(2 * interval)
	var orphans []string
	for remote, who := range l.pollers(since) {
		if who["r1"] {
			orphans = append(orphans, remote)
		}
	}
	before := l.count()
	replicas[1].cancel()
	<-replicas[1].done
	replicas[1].done <- nil
	killed := time.Now()
	took := eventually(b, "the orphans polled by a survivor", time.Minute, func() bool {
		p := l.pollers(killed)
		for _, remote := range orphans {
			if len(p[remote]) == 0 {
				return false
			}
		}
		return true
	})
	time.Sleep(2 * interval)
	return float64(took) / float64(leaseDuration), l.count() - before
}
