package cluster_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/cluster"
)

// wire counts the requests a client makes and the bytes it sends and
// receives.
type wire struct {
	next                http.RoundTripper
	requests, sent, got atomic.Int64
}

func (w *wire) RoundTrip(r *http.Request) (*http.Response, error) {
	w.requests.Add(1)
	if r.ContentLength > 0 {
		w.sent.Add(r.ContentLength)
	}
	resp, err := w.next.RoundTrip(r)
	if err == nil {
		resp.Body = &counted{ReadCloser: resp.Body, n: &w.got}
	}
	return resp, err
}

// wiredStore is a ConfigMapStore in ns whose client's requests w counts.
func wiredStore(t testing.TB, ns string) (*cluster.ConfigMapStore, *wire) {
	t.Helper()
	w := &wire{}
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { w.next = rt; return w }
	client, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	s, err := cluster.NewConfigMapStore(client, cluster.ConfigMapStoreConfig{Namespace: ns})
	require.NoError(t, err)
	return s, w
}

type counted struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c *counted) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// BenchmarkConfigMapStore writes n checkpoints into an empty store, 8 at
// a time (the watcher's default delivery concurrency: a first delivery of
// n targets), then reads every one back, 8 at a time (a replica taking
// them over). It reports what one Put and one Get cost in requests and in
// bytes on the wire (sent and received), how many the store made a second
// (on envtest's client, which has no rate limit), and the bytes the
// ConfigMaps hold per checkpoint. The bytes of a Put or Get grow with the
// checkpoints that share its ConfigMap; under a controller's rate limit
// (controller-runtime's default: 20 requests a second) what bounds the
// rate is the requests.
func BenchmarkConfigMapStore(b *testing.B) {
	for _, n := range []int{500, 2000, 8000} {
		b.Run(fmt.Sprint("checkpoints-", n), func(b *testing.B) {
			var m storeCost
			for range b.N {
				m.add(storeRound(b, n))
			}
			m.report(b, b.N, n)
		})
	}
}

type storeCost struct {
	putReqs, putBytes, getReqs, getBytes float64
	stored                               float64
	putWall, getWall                     time.Duration
}

func (m *storeCost) add(o storeCost) {
	m.putReqs += o.putReqs
	m.putBytes += o.putBytes
	m.getReqs += o.getReqs
	m.getBytes += o.getBytes
	m.putWall += o.putWall
	m.getWall += o.getWall
	m.stored += o.stored
}

func (m *storeCost) report(b *testing.B, rounds, n int) {
	per := float64(rounds * n)
	b.ReportMetric(m.putReqs/per, "req/put")
	b.ReportMetric(m.putBytes/per, "B/put")
	b.ReportMetric(per/m.putWall.Seconds(), "puts/s")
	b.ReportMetric(m.getReqs/per, "req/get")
	b.ReportMetric(m.getBytes/per, "B/get")
	b.ReportMetric(per/m.getWall.Seconds(), "gets/s")
	b.ReportMetric(m.stored/per, "B/checkpoint")
}

func storeRound(b *testing.B, n int) storeCost {
	b.Helper()
	ns := env.Namespace(b)
	s, w := wiredStore(b, ns)
	key := func(i int) string { return fmt.Sprintf("team-%d/app-%d/apply", i%97, i) }
	cp := func(i int) watcher.Checkpoint {
		return watcher.Checkpoint{
			Commit: named(fmt.Sprintf("%040x", i)), Tree: named(fmt.Sprintf("%040x", i+1)), Target: fmt.Sprintf("%064x", i),
			Time: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC),
		}
	}
	ctx := context.Background()
	each := func(op func(i int) error) time.Duration {
		start := time.Now()
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
					if err := op(i); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	var c storeCost
	c.putWall = each(func(i int) error { return s.Put(ctx, key(i), cp(i)) })
	c.putReqs, c.putBytes = float64(w.requests.Swap(0)), float64(w.sent.Swap(0)+w.got.Swap(0))
	c.getWall = each(func(i int) error {
		got, ok, err := s.Get(ctx, key(i))
		if err == nil && (!ok || got.Commit != cp(i).Commit) {
			err = fmt.Errorf("checkpoint %d: %v %+v", i, ok, got)
		}
		return err
	})
	c.getReqs, c.getBytes = float64(w.requests.Swap(0)), float64(w.sent.Swap(0)+w.got.Swap(0))
	cms, err := env.Kube.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: cluster.LabelCheckpoints})
	require.NoError(b, err)
	for _, cm := range cms.Items {
		for k, v := range cm.Data {
			c.stored += float64(len(k) + len(v))
		}
	}
	return c
}
