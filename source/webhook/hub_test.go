package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/source/webhook"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// waitSubscribers waits until the hub has n subscriptions.
func waitSubscribers(t *testing.T, h *webhook.Hub, n int) {
	t.Helper()
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	for {
		got, changed := h.Subscribers()
		if got == n {
			return
		}
		select {
		case <-changed:
		case <-timeout.C:
			t.Fatalf("hub has %d subscribers, want %d", got, n)
		}
	}
}

// agent is a watcher subscribed to the hub, as an agent runs it.
type agent struct {
	w    *watcher.Watcher
	sink *watchertest.Sink
	obs  *watchertest.Observer
}

func startAgent(t *testing.T, hubURL, token string, targets ...watcher.Target) *agent {
	a := &agent{sink: watchertest.NewSink("rec"), obs: watchertest.NewObserver()}
	a.w = watcher.New(watcher.WithCacheDir(t.TempDir()), watcher.WithInterval(time.Hour), watcher.WithObserver(a.obs))
	require.NoError(t, a.w.Route(watchertest.NewSource(targets...), a.sink))
	sub := newSubscriber(t, newSSE(t, webhook.SSEConfig{URL: hubURL, Token: token}), a.w,
		webhook.SubscriberConfig{Debounce: 10 * time.Millisecond, RetryMin: 10 * time.Millisecond, RetryMax: 100 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- a.w.Run(ctx) }()
	go func() { done <- sub.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
		assert.NoError(t, <-done)
	})
	return a
}

// pollsSince counts the agent's polls that started at or after t0.
func pollsSince(a *agent, t0 time.Time) int {
	return a.obs.Count(func(e watcher.Event) bool {
		return e.Type == watcher.EventPolled && !e.Time.Add(-e.Duration).Before(t0)
	})
}

func githubPush(t *testing.T, h http.Handler, repoURL string) {
	body := fixture(t, "github_push.json", repoURL)
	rec := post(h, body, deliveries[0].headers(body))
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
}

func TestHubFansOutToSubscribers(t *testing.T) {
	srv := gittest.NewServer(t)
	repoA, repoB := srv.NewRepo(t, "g/a"), srv.NewRepo(t, "g/b")
	repoA.Commit(t, "1", gittest.File("f", "1"))
	repoB.Commit(t, "1", gittest.File("f", "1"))

	reg := prometheus.NewRegistry()
	// The debounce is longer than 100 pushes take on a loaded machine, so
	// that the burst below is one hint (with 20 ms, a busy CI machine split
	// it in two).
	hub, err := webhook.NewHub(webhook.HubConfig{Webhook: webhook.Config{GitHubSecret: "gh-secret"}, Tokens: []string{"agent-token"}, Debounce: time.Second,
		Registerer: reg})
	require.NoError(t, err)
	hubSrv := httptest.NewServer(hub)
	defer hubSrv.Close()
	defer hub.Close()

	a1 := startAgent(t, hubSrv.URL, "agent-token", watcher.Target{ID: "a", URL: repoA.URL()})
	a2 := startAgent(t, hubSrv.URL, "agent-token", watcher.Target{ID: "a", URL: repoA.URL(), Path: "."})
	a3 := startAgent(t, hubSrv.URL, "agent-token", watcher.Target{ID: "b", URL: repoB.URL()})
	for _, a := range []*agent{a1, a2, a3} {
		a.sink.WaitDelivered(t, 1)
		a.obs.WaitFor(t, "the first poll's end", watchertest.Is(watcher.EventPolled, ""))
	}
	waitSubscribers(t, hub, 3)
	listsB := repoB.Counts().Lists.Load()

	t0 := time.Now()
	c2 := repoA.Commit(t, "2", gittest.File("f", "2"))
	githubPush(t, hub.Webhooks(), repoA.URL())
	a1.sink.WaitCommit(t, "a", hash(c2))
	a2.sink.WaitCommit(t, "a", hash(c2))
	assert.Equal(t, 2.0, testutil.ToFloat64(hub.Metrics().Sent), "one hint to each subscriber of g/a")
	assert.Equal(t, listsB, repoB.Counts().Lists.Load(), "the subscriber of g/b did not poll")
	assert.Zero(t, pollsSince(a3, t0))

	// A burst of 100 pushes is one hint, so one poll, per subscriber.
	a1.obs.WaitFor(t, "the hinted poll's end", func(e watcher.Event) bool {
		return e.Type == watcher.EventPolled && !e.Time.Add(-e.Duration).Before(t0)
	})
	t1 := time.Now()
	c3 := repoA.Commit(t, "3", gittest.File("f", "3"))
	for range 100 {
		githubPush(t, hub.Webhooks(), repoA.URL())
	}
	a1.sink.WaitCommit(t, "a", hash(c3))
	a2.sink.WaitCommit(t, "a", hash(c3))
	assert.Equal(t, 4.0, testutil.ToFloat64(hub.Metrics().Sent), "100 pushes, one more hint each")
	assert.Equal(t, 99.0, testutil.ToFloat64(hub.Metrics().Coalesced))
	a1.obs.WaitFor(t, "the burst's poll's end", func(e watcher.Event) bool {
		return e.Type == watcher.EventPolled && !e.Time.Add(-e.Duration).Before(t1)
	})
	assert.Equal(t, 1, pollsSince(a1, t1), "one poll for the burst")
	n, err := testutil.GatherAndCount(reg, "modwatch_hub_subscribers")
	require.NoError(t, err)
	assert.Equal(t, 1, n)
}

func TestHubRefusals(t *testing.T) {
	hub, err := webhook.NewHub(webhook.HubConfig{Webhook: webhook.Config{GitHubSecret: "s"}, Tokens: []string{"good"}, MaxRepositories: 2, MaxSubscribers: 1})
	require.NoError(t, err)
	defer hub.Close()
	srv := httptest.NewServer(hub)
	defer srv.Close()
	noop := func(string) {}
	ctx := context.Background()

	err = newSSE(t, webhook.SSEConfig{URL: srv.URL, Token: "bad"}).Subscribe(ctx, []string{"https://h/r"}, noop)
	require.ErrorContains(t, err, "401")
	err = newSSE(t, webhook.SSEConfig{URL: srv.URL}).Subscribe(ctx, []string{"https://h/r"}, noop)
	require.ErrorContains(t, err, "401")
	err = newSSE(t, webhook.SSEConfig{URL: srv.URL, Token: "good"}).Subscribe(ctx, []string{"https://h/a", "https://h/b", "https://h/c"}, noop)
	require.ErrorContains(t, err, "400")
	err = newSSE(t, webhook.SSEConfig{URL: srv.URL, Token: "good"}).Subscribe(ctx, []string{"ftp://h/a"}, noop)
	require.ErrorContains(t, err, "400")

	// One subscriber at most: a second is refused while the first is open.
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	stream := newSSE(t, webhook.SSEConfig{URL: srv.URL, Token: "good"})
	go func() {
		done <- stream.Subscribe(sctx, []string{"https://h/a"}, noop)
	}()
	waitSubscribers(t, hub, 1)
	err = newSSE(t, webhook.SSEConfig{URL: srv.URL, Token: "good"}).Subscribe(ctx, []string{"https://h/b"}, noop)
	require.ErrorContains(t, err, "503")
	// The subscriber hears only what it asked for.
	assert.False(t, hub.Trigger("https://h/b"))
	assert.True(t, hub.Trigger("https://h/a"))
	cancel()
	<-done

	_, err = webhook.NewHub(webhook.HubConfig{Webhook: webhook.Config{GitHubSecret: "s"}})
	require.Error(t, err, "a hub needs tokens")
}

// A subscriber that never reads does not delay the others, and is
// disconnected.
func TestHubStalledSubscriber(t *testing.T) {
	hub, err := webhook.NewHub(webhook.HubConfig{
		Webhook: webhook.Config{GitHubSecret: "s"}, Tokens: []string{"t"},
		Debounce: -1, WriteTimeout: 200 * time.Millisecond, QueueLength: 64,
	})
	require.NoError(t, err)
	srv := httptest.NewServer(hub)
	defer srv.Close()
	defer hub.Close()
	repos := make([]string, 500)
	for i := range repos {
		repos[i] = fmt.Sprintf("https://h/r%d", i)
	}

	// The stalled subscriber: subscribes to many repositories, then never
	// reads a byte.
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	body, err := json.Marshal(map[string][]string{"repositories": repos})
	require.NoError(t, err)
	fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: hub\r\nAuthorization: Bearer t\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	waitSubscribers(t, hub, 1)

	// A healthy subscriber of one of them.
	heard := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	stream := newSSE(t, webhook.SSEConfig{URL: srv.URL, Token: "t"})
	go func() {
		done <- stream.Subscribe(ctx, repos[:1], func(string) {
			select {
			case heard <- struct{}{}:
			default:
			}
		})
	}()
	defer func() { cancel(); <-done }()
	waitSubscribers(t, hub, 2)

	// Hint until the stalled one is dropped (its buffers fill, a write
	// times out or its queue overflows).
	for i := 0; i < 5_000_000; i++ {
		hub.Trigger(repos[i%len(repos)])
		if n, _ := hub.Subscribers(); n == 1 {
			break
		}
	}
	n, _ := hub.Subscribers()
	require.Equal(t, 1, n, "the stalled subscriber was disconnected")
	m := hub.Metrics().Disconnects
	assert.Equal(t, 1.0, testutil.ToFloat64(m.WithLabelValues("write"))+testutil.ToFloat64(m.WithLabelValues("slow")))

	// The healthy one still hears, at once.
	select {
	case <-heard:
	default:
	}
	hub.Trigger(repos[0])
	select {
	case <-heard:
	case <-time.After(10 * time.Second):
		t.Fatal("the healthy subscriber no longer hears")
	}
}

// The hub restarts: subscribers reconnect with backoff and resubscribe.
func TestHubRestart(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/a")
	repo.Commit(t, "1", gittest.File("f", "1"))
	cfg := webhook.HubConfig{Webhook: webhook.Config{GitHubSecret: "gh-secret"}, Tokens: []string{"t"}, Debounce: -1}

	hub1, err := webhook.NewHub(cfg)
	require.NoError(t, err)
	hubSrv := httptest.NewServer(hub1)
	addr := hubSrv.Listener.Addr().String()
	a := startAgent(t, hubSrv.URL, "t", watcher.Target{ID: "a", URL: repo.URL()})
	a.sink.WaitDelivered(t, 1)
	waitSubscribers(t, hub1, 1)

	hub1.Close()
	hubSrv.Close()

	hub2, err := webhook.NewHub(cfg)
	require.NoError(t, err)
	l, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	hubSrv2 := httptest.NewUnstartedServer(hub2)
	hubSrv2.Listener.Close()
	hubSrv2.Listener = l
	hubSrv2.Start()
	defer hubSrv2.Close()
	defer hub2.Close() // first: it ends the subscriptions the server waits for
	waitSubscribers(t, hub2, 1)

	c2 := repo.Commit(t, "2", gittest.File("f", "2"))
	githubPush(t, hub2.Webhooks(), repo.URL())
	a.sink.WaitCommit(t, "a", hash(c2))
}

// Keep-alives hold an idle subscription open past the client's idle
// timeout (three times over: a loaded machine may stall a keep-alive for
// a good part of a second, never twenty of them); the maximum age ends it
// cleanly, with a reason.
func TestHubKeepAliveAndMaxAge(t *testing.T) {
	hub, err := webhook.NewHub(webhook.HubConfig{
		Webhook: webhook.Config{GitHubSecret: "s"}, Tokens: []string{"t"},
		KeepAlive: 50 * time.Millisecond, MaxConnectionAge: 3 * time.Second,
	})
	require.NoError(t, err)
	srv := httptest.NewServer(hub)
	defer srv.Close()
	defer hub.Close()
	err = newSSE(t, webhook.SSEConfig{URL: srv.URL, Token: "t", IdleTimeout: time.Second}).
		Subscribe(context.Background(), []string{"https://h/a"}, func(string) {})
	require.NoError(t, err, "a clean end, not an idle timeout")
	waitSubscribers(t, hub, 0)
	assert.Equal(t, 1.0, testutil.ToFloat64(hub.Metrics().Disconnects.WithLabelValues("max-age")))
}

// hash is the commit a test repository named in hex.
func hash(commit string) gitutil.Hash {
	h, err := gitutil.ParseHash(commit)
	if err != nil {
		panic(err)
	}
	return h
}
