package webhook_test

import (
	"context"
	"crypto/subtle"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/source/webhook"
)

// lines is a logger that keeps what it is told.
type lines struct {
	mu    sync.Mutex
	all   []string
	added chan struct{} // a line was kept
}

func (l *lines) logger() logr.Logger {
	l.added = make(chan struct{}, 1)
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		l.all = append(l.all, prefix+" "+args)
		l.mu.Unlock()
		select {
		case l.added <- struct{}{}:
		default:
		}
	}, funcr.Options{Verbosity: 1})
}

// waitFor waits until a line holds s.
func (l *lines) waitFor(t *testing.T, s string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for !l.has(s) {
		select {
		case <-l.added:
		case <-timeout:
			t.Fatalf("no log line holds %s", s)
		}
	}
}

func (l *lines) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.all {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

// A hub with a token validator and no static tokens admits whom the
// validator approves; the logger of the server's base context hears the
// subscription end (a handler logs to its request's context). A
// subscriber over TLS needs SSEConfig.HTTPClient.
func TestHubTokenValidatorLoggerAndClient(t *testing.T) {
	var log lines
	hub, err := webhook.NewHub(webhook.HubConfig{Webhook: webhook.Config{GitHubSecret: "s"},
		TokenValidator: func(tok string) bool { return subtle.ConstantTimeCompare([]byte(tok), []byte("vault-issued")) == 1 }})
	require.NoError(t, err)
	defer hub.Close()
	srv := httptest.NewUnstartedServer(hub)
	srv.Config.BaseContext = func(net.Listener) context.Context { return logr.NewContext(context.Background(), log.logger()) }
	srv.StartTLS()
	defer srv.Close()
	noop := func(string) {}
	ctx := context.Background()

	err = newSSE(t, webhook.SSEConfig{URL: srv.URL, Token: "vault-issued"}).Subscribe(ctx, []string{"https://h/a"}, noop)
	assert.ErrorContains(t, err, "certificate", "the default client does not trust the hub's CA")
	err = newSSE(t, webhook.SSEConfig{URL: srv.URL, Token: "guessed", HTTPClient: srv.Client()}).Subscribe(ctx, []string{"https://h/a"}, noop)
	assert.ErrorContains(t, err, "401", "the validator refuses")

	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	stream := newSSE(t, webhook.SSEConfig{URL: srv.URL, Token: "vault-issued", HTTPClient: srv.Client()})
	go func() {
		done <- stream.Subscribe(sctx, []string{"https://h/a"}, noop)
	}()
	waitSubscribers(t, hub, 1)
	cancel()
	<-done
	waitSubscribers(t, hub, 0)
	log.waitFor(t, `"subscription ended"`)
}

// refusingStream is a hub that refuses every subscription.
type refusingStream struct{}

func (refusingStream) Subscribe(context.Context, []string, func(string)) error {
	return errors.New("refused")
}

// The logger of Run's context hears the stream's failures.
func TestSubscriberLogger(t *testing.T) {
	failed := make(chan string, 1)
	log := funcr.New(func(prefix, args string) {
		if strings.Contains(args, `"stream failed"`) {
			select {
			case failed <- args:
			default:
			}
		}
	}, funcr.Options{})
	sub := newSubscriber(t, refusingStream{}, newFakeWatched("https://h/r"), webhook.SubscriberConfig{})
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), log))
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	select {
	case line := <-failed:
		assert.Contains(t, line, "refused")
	case <-time.After(30 * time.Second):
		t.Fatal("no failure logged")
	}
	cancel()
	require.NoError(t, <-done)
}

// A refused webhook is logged, once per cause and sender: a provider not
// enabled, a bad signature, an unknown sender kind; a sender retrying
// adds no line.
func TestRefusalsAreLoggedOnce(t *testing.T) {
	var log lines
	h, err := webhook.New(webhook.Config{GenericSecret: "s"}, newFakeWatched("https://h/r"))
	require.NoError(t, err)
	defer h.Close()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.BaseContext = func(net.Listener) context.Context { return logr.NewContext(context.Background(), log.logger()) }
	srv.Start()
	defer srv.Close()
	post := func(header, value string, want int) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"repository": "https://h/r"}`))
		require.NoError(t, err)
		req.Header.Set(header, value)
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, want, resp.StatusCode)
	}
	count := func(s string) int {
		log.mu.Lock()
		defer log.mu.Unlock()
		n := 0
		for _, line := range log.all {
			if strings.Contains(line, s) {
				n++
			}
		}
		return n
	}
	for range 3 {
		post("X-GitHub-Event", "push", http.StatusForbidden)
		post("X-Signature", "sha256=00", http.StatusForbidden)
		post("X-Unknown", "x", http.StatusBadRequest)
	}
	assert.Equal(t, 1, count(`"provider"="github" "reason"="this provider is not enabled"`), log.all)
	assert.Equal(t, 1, count(`"reason"="signature does not match"`), log.all)
	assert.Equal(t, 1, count(`"reason"="not a webhook of a known provider"`), log.all)
	assert.Equal(t, 3, count("refused webhook"))
}

// newSSE is webhook.NewSSE of a configuration that validates.
func newSSE(t *testing.T, cfg webhook.SSEConfig) *webhook.SSE {
	t.Helper()
	s, err := webhook.NewSSE(cfg)
	require.NoError(t, err)
	return s
}

// newSubscriber is webhook.NewSubscriber of a configuration that validates.
func newSubscriber(t *testing.T, stream webhook.Stream, w webhook.Watched, cfg webhook.SubscriberConfig) *webhook.Subscriber {
	t.Helper()
	s, err := webhook.NewSubscriber(stream, w, cfg)
	require.NoError(t, err)
	return s
}

// An SSE needs an http or https endpoint; a Subscriber's retry bounds are
// checked once defaulted. Each refusal is the constructor's.
func TestStreamConfigsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  webhook.SSEConfig
		err  string
	}{
		{name: "https", cfg: webhook.SSEConfig{URL: "https://hub.example.com/subscribe"}},
		{name: "http, token, timeout", cfg: webhook.SSEConfig{URL: "http://127.0.0.1:8080/", Token: "t", IdleTimeout: time.Second}},
		{name: "no URL", err: "is not an http or https URL"},
		{name: "other scheme", cfg: webhook.SSEConfig{URL: "ftp://hub.example.com/"}, err: "is not an http or https URL"},
		{name: "no host", cfg: webhook.SSEConfig{URL: "https:///subscribe"}, err: "is not an http or https URL"},
		{name: "negative idle timeout", cfg: webhook.SSEConfig{URL: "https://h/", IdleTimeout: -time.Second}, err: "idleTimeout cannot be negative"},
	} {
		t.Run("SSE/"+tc.name, func(t *testing.T) {
			s, err := webhook.NewSSE(tc.cfg)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				assert.Nil(t, s)
				return
			}
			require.NoError(t, err)
			assert.NotNil(t, s)
		})
	}
	for _, tc := range []struct {
		name string
		cfg  webhook.SubscriberConfig
		err  string
	}{
		{name: "zero: the defaults"},
		{name: "no debounce", cfg: webhook.SubscriberConfig{Debounce: -1}},
		{name: "bounds", cfg: webhook.SubscriberConfig{RetryMin: time.Millisecond, RetryMax: time.Second}},
		{name: "max under the default min", cfg: webhook.SubscriberConfig{RetryMax: time.Millisecond}, err: "retryMax 1ms is under retryMin 1s"},
		{name: "negative", cfg: webhook.SubscriberConfig{RetryMin: -time.Second}, err: "cannot be negative"},
	} {
		t.Run("Subscriber/"+tc.name, func(t *testing.T) {
			s, err := webhook.NewSubscriber(refusingStream{}, newFakeWatched("https://h/r"), tc.cfg)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				assert.Nil(t, s)
				return
			}
			require.NoError(t, err)
			assert.NotNil(t, s)
		})
	}
	var c webhook.SubscriberConfig
	c.Debounce = -time.Second
	c.Default()
	assert.Equal(t, webhook.SubscriberConfig{RetryMin: time.Second, RetryMax: 2 * time.Minute}, c, "a negative debounce is none")
	c = webhook.SubscriberConfig{}
	c.Default()
	assert.Equal(t, webhook.SubscriberConfig{Debounce: time.Second, RetryMin: time.Second, RetryMax: 2 * time.Minute}, c)
}
