package watcher_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/mirror"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// hugeGit is a watchertest.Git whose mirrors say a fetch sent a huge
// count of requests (FetchResult.Requests is whatever a Mirror says).
type hugeGit struct{ *watchertest.Git }

func (g hugeGit) OpenMirror(dir, url string, opts mirror.Options) (watcher.Mirror, error) {
	m, err := g.Git.OpenMirror(dir, url, opts)
	if err != nil {
		return nil, err
	}
	return hugeMirror{m}, nil
}

type hugeMirror struct{ watcher.Mirror }

func (m hugeMirror) FetchListed(ctx context.Context, auth *gitutil.Auth, listed map[string]gitutil.Hash) (mirror.FetchResult, error) {
	res, err := m.Mirror.FetchListed(ctx, auth, listed)
	res.Requests = math.MaxInt
	return res, err
}

// A mirror that says a fetch sent a huge count of requests is not
// believed past a bound: the gate is not held, and every host's polls go
// on.
func TestAMirrorsHugeRequestCountStopsNoHost(t *testing.T) {
	g := watchertest.NewGit()
	a := g.Remote("https://a.example/app.git")
	ca := a.Commit(t, map[string]string{"f": "1"})
	b := g.Remote("https://b.example/app.git")
	cb := b.Commit(t, map[string]string{"f": "1"})
	_, _ = ca, cb

	sinkA, sinkB := watchertest.NewSink("a"), watchertest.NewSink("b")
	srcA := watchertest.NewSource(watcher.Target{ID: "a", URL: a.URL(), Revision: "main"})
	srcB := watchertest.NewSource()
	w := watchertest.NewWatcher(t,
		watcher.WithGit(hugeGit{g}),
		watcher.WithHostBudget("a.example", watcher.HostBudget{PerSecond: 10, Burst: 10}),
	)
	if err := w.Route(srcA, sinkA); err != nil {
		t.Fatal(err)
	}
	if err := w.Route(srcB, sinkB); err != nil {
		t.Fatal(err)
	}
	stop := watchertest.Run(t, w.Run)
	_ = stop
	// a's fetch ends (its Charge starts); then b.example's target comes.
	deadline := time.Now().Add(10 * time.Second)
	for a.Fetches() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	srcB.Set(watcher.Target{ID: "b", URL: b.URL(), Revision: "main"})
	deadline = time.Now().Add(5 * time.Second)
	for len(sinkB.Delivered()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if len(sinkB.Delivered()) == 0 {
		t.Errorf("b.example's target was not delivered in 5s (b listed %d times): the gate is held by a.example's Charge(MaxInt-1)", b.Lists())
		// The watcher cannot stop either: skip its cleanup's wait.
		t.FailNow()
	}
}
