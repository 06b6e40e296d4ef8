package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/source/webhook"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// fakeWatched is a Watched whose set of repositories a test changes.
type fakeWatched struct {
	mu      sync.Mutex
	repos   []string
	changed chan struct{}
	hints   []string
}

func newFakeWatched(repos ...string) *fakeWatched {
	return &fakeWatched{repos: repos, changed: make(chan struct{})}
}

func (f *fakeWatched) set(repos ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.repos = repos
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeWatched) Remotes() ([]string, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.repos), f.changed
}

func (f *fakeWatched) Trigger(url string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hints = append(f.hints, url)
	return true
}

// subscription is one call to the fake stream.
type subscription struct {
	repos []string
	at    time.Time
	end   chan error // what Subscribe returns; ctx ending returns too
}

// fakeStream hands each Subscribe call to the test.
type fakeStream struct{ calls chan *subscription }

func (f *fakeStream) Subscribe(ctx context.Context, repos []string, hint func(string)) error {
	s := &subscription{repos: repos, at: time.Now(), end: make(chan error, 1)}
	f.calls <- s
	select {
	case err := <-s.end:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// All in fake time: the waits are exact and cost nothing.
func TestSubscriberLifecycle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newFakeWatched("https://h/a")
		stream := &fakeStream{calls: make(chan *subscription)}
		sub := newSubscriber(t, stream, w, webhook.SubscriberConfig{Debounce: time.Second, RetryMin: time.Second, RetryMax: time.Minute})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- sub.Run(ctx) }()

		first := <-stream.calls
		assert.Equal(t, []string{"https://h/a"}, first.repos)

		// Two changes within the debounce period: exactly one resubscription,
		// to the final set, a debounce period after the last change.
		w.set("https://h/a", "https://h/b")
		time.Sleep(500 * time.Millisecond)
		w.set("https://h/a", "https://h/b", "https://h/c")
		changedAt := time.Now()
		second := <-stream.calls
		assert.Equal(t, []string{"https://h/a", "https://h/b", "https://h/c"}, second.repos)
		assert.Equal(t, time.Second, second.at.Sub(changedAt))

		// A change back to the same set does not resubscribe.
		w.set("https://h/a", "https://h/b", "https://h/c")
		synctest.Wait()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		select {
		case s := <-stream.calls:
			t.Fatalf("resubscribed to an unchanged set: %v", s.repos)
		default:
		}

		// A clean end of stream reconnects at once.
		second.end <- nil
		third := <-stream.calls
		assert.Equal(t, second.repos, third.repos)
		assert.Zero(t, time.Until(third.at))

		// Errors back off exponentially, with jitter.
		var gaps []time.Duration
		prev := third
		for range 4 {
			prev.end <- errors.New("server unavailable")
			failedAt := time.Now()
			next := <-stream.calls
			gaps = append(gaps, next.at.Sub(failedAt))
			prev = next
		}
		for i, g := range gaps {
			full := time.Second << i
			assert.GreaterOrEqual(t, g, full/2, "gap %d", i)
			assert.LessOrEqual(t, g, full, "gap %d", i)
		}
		// A success resets the backoff.
		prev.end <- nil
		prev = <-stream.calls
		prev.end <- errors.New("again")
		failedAt := time.Now()
		next := <-stream.calls
		assert.LessOrEqual(t, next.at.Sub(failedAt), time.Second)

		cancel()
		require.NoError(t, <-done)
	})
}

// sseServer plays the subscription endpoint of a push hub.
type sseServer struct {
	token      string
	subscribed chan struct{} // one send per subscription accepted
	mu         sync.Mutex
	subs       []chan string // one per live subscription; "" closes it
	seen       [][]string
	fail       int // answer the next n subscriptions with 503
}

func (s *sseServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+s.token {
		http.Error(w, "bad token", http.StatusUnauthorized)
		return
	}
	var req struct {
		Repositories []string `json:"repositories"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	if s.fail > 0 {
		s.fail--
		s.mu.Unlock()
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return
	}
	ch := make(chan string, 16)
	s.subs = append(s.subs, ch)
	s.seen = append(s.seen, req.Repositories)
	s.mu.Unlock()
	if s.subscribed != nil {
		s.subscribed <- struct{}{}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, ": connected\n\n")
	w.(http.Flusher).Flush()
	for {
		select {
		case <-r.Context().Done():
			return
		case u := <-ch:
			if u == "" {
				fmt.Fprint(w, "event: close\ndata: {\"reason\": \"max age\"}\n\n")
				w.(http.Flusher).Flush()
				return
			}
			fmt.Fprintf(w, "event: hint\ndata: {\"repository\": %q}\n\n", u)
			w.(http.Flusher).Flush()
		}
	}
}

func (s *sseServer) send(u string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ch := range s.subs {
		ch <- u
	}
}

// The SSE stream end to end: a hint from the server makes a real watcher
// poll and deliver; the server closing the stream is followed by a
// reconnection.
func TestSSEStreamEndToEnd(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/app")
	repo.Commit(t, "1", gittest.File("f", "1"))
	sink := watchertest.NewSink("rec")
	w := watcher.New(watcher.WithCacheDir(t.TempDir()), watcher.WithInterval(time.Hour))
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "app", URL: repo.URL()}), sink))

	hub := &sseServer{token: "t0ken", fail: 1, subscribed: make(chan struct{}, 4)}
	hubSrv := httptest.NewServer(hub)
	defer hubSrv.Close()
	sub := newSubscriber(t, newSSE(t, webhook.SSEConfig{URL: hubSrv.URL, Token: "t0ken"}), w,
		webhook.SubscriberConfig{RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond, Debounce: 10 * time.Millisecond})

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- w.Run(ctx) }()
	go func() { done <- sub.Run(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
		require.NoError(t, <-done)
	}()
	sink.WaitDelivered(t, 1)
	<-hub.subscribed // after one 503 and a backoff

	c2 := repo.Commit(t, "2", gittest.File("f", "2"))
	hub.send(repo.URL())
	sink.WaitCommit(t, "app", hash(c2))

	hub.send("") // the hub ends the stream; the subscriber comes back
	<-hub.subscribed
	c3 := repo.Commit(t, "3", gittest.File("f", "3"))
	hub.send(repo.URL())
	sink.WaitCommit(t, "app", hash(c3))
	assert.Equal(t, []string{repo.URL()}, hub.seen[0])
}

func TestSSEErrors(t *testing.T) {
	hub := &sseServer{token: "right"}
	hubSrv := httptest.NewServer(hub)
	defer hubSrv.Close()
	err := newSSE(t, webhook.SSEConfig{URL: hubSrv.URL, Token: "wrong"}).Subscribe(context.Background(), []string{"https://h/r"}, func(string) {})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "401")

	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "hello") }))
	defer plain.Close()
	err = newSSE(t, webhook.SSEConfig{URL: plain.URL}).Subscribe(context.Background(), nil, func(string) {})
	require.ErrorContains(t, err, "text/event-stream")

	silent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer silent.Close()
	err = newSSE(t, webhook.SSEConfig{URL: silent.URL, IdleTimeout: 50 * time.Millisecond}).Subscribe(context.Background(), nil, func(string) {})
	require.ErrorContains(t, err, "silent")
}
