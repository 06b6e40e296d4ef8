package apply_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"testing/fstest"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/modwatch/modwatch/sink/apply"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
)

// requestCounter counts the apiserver requests by what they do.
type requestCounter struct {
	next                   http.RoundTripper
	reads, dryRuns, writes atomic.Int64
}

func (c *requestCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	switch {
	case r.Method == http.MethodGet:
		c.reads.Add(1)
	case r.URL.Query().Get("dryRun") != "":
		c.dryRuns.Add(1)
	default:
		c.writes.Add(1)
	}
	return c.next.RoundTrip(r)
}

func (c *requestCounter) reset() { c.reads.Store(0); c.dryRuns.Store(0); c.writes.Store(0) }

func (c *requestCounter) report(b *testing.B) {
	n := float64(b.N)
	b.ReportMetric(float64(c.writes.Load())/n, "writes/op")
	b.ReportMetric(float64(c.dryRuns.Load())/n, "dryruns/op")
	b.ReportMetric(float64(c.reads.Load())/n, "reads/op")
}

// countingSink is a sink whose requests are counted.
func countingSink(b *testing.B, cfg apply.Config) (*apply.Sink, *requestCounter) {
	counter := &requestCounter{}
	kube := rest.CopyConfig(env.Config)
	kube.QPS, kube.Burst = 1000, 2000 // measure the sink, not client-side throttling
	kube.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { counter.next = rt; return counter }
	s, err := apply.New(kube, cfg)
	if err != nil {
		b.Fatal(err)
	}
	return s, counter
}

// tree has n ConfigMaps of value "0", but cm-007's value is v.
func tree(n int, v string) fstest.MapFS {
	files := fstest.MapFS{}
	for i := range n {
		name := fmt.Sprintf("cm-%03d", i)
		value := "0"
		if i == 7 {
			value = v
		}
		files[fmt.Sprintf("apps/%03d.yaml", i)] = file(configMap(name, value))
	}
	return files
}

func benchNamespace(b *testing.B) string {
	ns, err := env.Kube.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-"}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = env.Kube.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

func mustApply(b *testing.B, s *apply.Sink, c watcher.Change) *apply.Result {
	res, err := s.Apply(context.Background(), c)
	if err != nil {
		b.Fatal(err)
	}
	return res
}

// BenchmarkApply500 applies 500 ConfigMaps into an empty namespace
// (initial), then commits that change one of them (one-changed, and
// one-changed-check-all with Config.AlwaysCheckDrift), then resyncs with no
// drift. Requests are counted by kind: writes (persisted), dry runs, reads.
func BenchmarkApply500(b *testing.B) {
	const n = 500
	b.Run("initial", func(b *testing.B) {
		s, counter := countingSink(b, apply.Config{})
		for b.Loop() {
			b.StopTimer()
			ns := benchNamespace(b)
			b.StartTimer()
			res := mustApply(b, s, change("bench/"+ns, "c1", payload.Render{Namespace: ns}, tree(n, "0")))
			if res.Count(apply.Created) != n {
				b.Fatal(res)
			}
		}
		counter.report(b)
	})
	oneChanged := func(b *testing.B, cfg apply.Config) {
		s, counter := countingSink(b, cfg)
		ns := benchNamespace(b)
		mustApply(b, s, change("bench/"+ns, "c0", payload.Render{Namespace: ns}, tree(n, "0")))
		counter.reset()
		i := 0
		for b.Loop() {
			i++
			c := change("bench/"+ns, fmt.Sprint("c", i), payload.Render{Namespace: ns}, tree(n, fmt.Sprint(i)))
			c.Reason = watcher.ReasonNewCommit
			res := mustApply(b, s, c)
			if res.Count(apply.Configured) != 1 {
				b.Fatal(res)
			}
		}
		counter.report(b)
	}
	b.Run("one-changed", func(b *testing.B) { oneChanged(b, apply.Config{}) })
	b.Run("one-changed-check-all", func(b *testing.B) { oneChanged(b, apply.Config{AlwaysCheckDrift: true}) })
	b.Run("resync-no-drift", func(b *testing.B) {
		s, counter := countingSink(b, apply.Config{})
		ns := benchNamespace(b)
		mustApply(b, s, change("bench/"+ns, "c0", payload.Render{Namespace: ns}, tree(n, "0")))
		counter.reset()
		for b.Loop() {
			c := change("bench/"+ns, "c0", payload.Render{Namespace: ns}, tree(n, "0"))
			c.Reason = watcher.ReasonResync
			if res := mustApply(b, s, c); res.Count(apply.Unchanged) != n {
				b.Fatal(res)
			}
		}
		counter.report(b)
	})
}
