package webhook

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/modwatch/modwatch/gitutil"
)

// HubConfig configures a Hub.
type HubConfig struct {
	// Webhook holds the secrets of the providers whose webhooks the hub
	// receives (its MinInterval is not used: the hub debounces itself).
	Webhook Config `json:"webhook"`
	// Tokens are the bearer tokens subscribers may present; see also
	// TokenValidator.
	Tokens []string `json:"tokens,omitempty"`
	// TokenValidator, when set, accepts subscribers whose bearer token it
	// approves, in addition to Tokens (a token a vault issues). It must
	// compare in constant time.
	TokenValidator func(token string) bool `json:"-"`
	// Registerer registers the hub's metrics (nil: not registered).
	Registerer prometheus.Registerer `json:"-"`
	// MaxSubscribers bounds the subscriptions at once (default 1000).
	MaxSubscribers int `json:"maxSubscribers,omitempty"`
	// MaxRepositories bounds the repositories of one subscription
	// (default 1000).
	MaxRepositories int `json:"maxRepositories,omitempty"`
	// MaxConnectionAge ends a subscription after this long, with the
	// reason "max-age", so clients reconnect and resubscribe (default 2h).
	MaxConnectionAge time.Duration `json:"maxConnectionAge,omitempty"`
	// KeepAlive is how often an idle subscription gets a comment line, so
	// that proxies keep it open (default 30s).
	KeepAlive time.Duration `json:"keepAlive,omitempty"`
	// Debounce is how long a repository must be quiet before its hint goes
	// out, so a burst of pushes is one hint (default 250ms; 0 sends at
	// once). MaxDelay bounds the wait during a long burst (default 2s).
	Debounce time.Duration `json:"debounce,omitempty"`
	MaxDelay time.Duration `json:"maxDelay,omitempty"`
	// QueueLength is how many repositories may wait to be sent to one
	// subscriber before it is disconnected as too slow (default 256).
	QueueLength int `json:"queueLength,omitempty"`
	// WriteTimeout disconnects a subscriber whose connection does not take
	// a write within it (default 10s).
	WriteTimeout time.Duration `json:"writeTimeout,omitempty"`
}

// Default fills in what is left at zero; a negative Debounce means none.
func (c *HubConfig) Default() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.MaxSubscribers == 0 {
		c.MaxSubscribers = 1000
	}
	if c.MaxRepositories == 0 {
		c.MaxRepositories = 1000
	}
	if c.QueueLength == 0 {
		c.QueueLength = 256
	}
	def(&c.MaxConnectionAge, 2*time.Hour)
	def(&c.KeepAlive, 30*time.Second)
	def(&c.Debounce, 250*time.Millisecond)
	def(&c.MaxDelay, 2*time.Second)
	def(&c.WriteTimeout, 10*time.Second)
	c.Debounce = max(c.Debounce, 0)
}

// Validate checks the configuration.
func (c HubConfig) Validate() error {
	if err := c.Webhook.Validate(); err != nil {
		return err
	}
	if c.MaxSubscribers < 0 || c.MaxRepositories < 0 || c.QueueLength < 0 {
		return errors.New("webhook: hub limits cannot be negative")
	}
	return nil
}

// Hub receives provider webhooks once and fans each push out, as a hint,
// to every subscriber of that repository (the role GitLab's kas plays for
// its agents). Subscribers speak the protocol of [SSE]. Fan-out never
// blocks: hints for one repository coalesce per subscriber, and a
// subscriber that cannot keep up is disconnected with a reason, so it
// reconnects and resubscribes.
type Hub struct {
	cfg   HubConfig
	hooks *Handler
	m     hubMetrics
	done  chan struct{}

	mu        sync.Mutex
	closed    bool
	subs      map[*hubSub]struct{}
	byRepo    map[string]map[*hubSub]struct{}
	debounced map[string]*debounced
	gen       chan struct{} // closed and replaced when subscribers change
}

type debounced struct {
	url   string
	first time.Time
	timer *time.Timer
}

type hubMetrics struct {
	subscribers prometheus.Gauge
	received    prometheus.Counter
	sent        prometheus.Counter
	coalesced   prometheus.Counter
	disconnects *prometheus.CounterVec
}

// NewHub returns a hub.
func NewHub(cfg HubConfig) (*Hub, error) {
	cfg.Default()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	h := &Hub{
		cfg: cfg, done: make(chan struct{}),
		subs: map[*hubSub]struct{}{}, byRepo: map[string]map[*hubSub]struct{}{},
		debounced: map[string]*debounced{}, gen: make(chan struct{}),
	}
	if len(cfg.Tokens) == 0 && cfg.TokenValidator == nil {
		return nil, errors.New("webhook: a hub needs subscriber tokens or a token validator")
	}
	h.m = hubMetrics{
		subscribers: prometheus.NewGauge(prometheus.GaugeOpts{Name: "modwatch_hub_subscribers", Help: "Subscriptions open now."}),
		received:    prometheus.NewCounter(prometheus.CounterOpts{Name: "modwatch_hub_hints_received_total", Help: "Verified pushes for a subscribed repository."}),
		sent:        prometheus.NewCounter(prometheus.CounterOpts{Name: "modwatch_hub_hints_sent_total", Help: "Hints written to subscribers."}),
		coalesced:   prometheus.NewCounter(prometheus.CounterOpts{Name: "modwatch_hub_hints_coalesced_total", Help: "Pushes folded into a hint already waiting."}),
		disconnects: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "modwatch_hub_disconnects_total", Help: "Subscriptions ended, by reason."}, []string{"reason"}),
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{h.m.subscribers, h.m.received, h.m.sent, h.m.coalesced, h.m.disconnects} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("webhook: hub metrics: %w", err)
			}
		}
	}
	wcfg := cfg.Webhook
	wcfg.MinInterval = time.Nanosecond // the hub debounces instead
	hooks, err := New(wcfg, h)
	if err != nil {
		return nil, err
	}
	h.hooks = hooks
	return h, nil
}

// HubMetrics are the hub's metrics, registered with HubConfig.Registerer.
type HubMetrics struct {
	Subscribers prometheus.Gauge
	Received    prometheus.Counter
	Sent        prometheus.Counter
	Coalesced   prometheus.Counter
	Disconnects *prometheus.CounterVec
}

// Metrics returns the hub's metrics.
func (h *Hub) Metrics() HubMetrics {
	return HubMetrics{h.m.subscribers, h.m.received, h.m.sent, h.m.coalesced, h.m.disconnects}
}

// Webhooks is the handler providers post their webhooks to.
func (h *Hub) Webhooks() http.Handler { return h.hooks }

// Subscribers returns how many subscriptions are open and a channel closed
// when that changes.
func (h *Hub) Subscribers() (int, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs), h.gen
}

// Close ends every subscription (reason "shutdown") and drops waiting
// hints. Handlers still running return promptly. Call it before shutting
// the HTTP server down: a subscription is never idle, so the server would
// wait for it (or register it with http.Server.RegisterOnShutdown).
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	close(h.done)
	for k, d := range h.debounced {
		d.timer.Stop()
		delete(h.debounced, k)
	}
	h.hooks.Close()
}

// Trigger receives each verified push (from the hub's webhook handler) and
// schedules its hint; it reports whether anyone subscribes to the
// repository.
func (h *Hub) Trigger(repoURL string) bool {
	key, err := gitutil.NormalizeURL(repoURL)
	if err != nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || len(h.byRepo[key]) == 0 {
		return false
	}
	h.m.received.Inc()
	if h.cfg.Debounce == 0 {
		h.fanOut(key, repoURL)
		return true
	}
	now := time.Now()
	if d, ok := h.debounced[key]; ok {
		h.m.coalesced.Inc()
		if now.Add(h.cfg.Debounce).Sub(d.first) <= h.cfg.MaxDelay {
			d.timer.Reset(h.cfg.Debounce)
		}
		return true
	}
	h.debounced[key] = &debounced{url: repoURL, first: now, timer: time.AfterFunc(h.cfg.Debounce, func() { h.fire(key) })}
	return true
}

func (h *Hub) fire(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	d, ok := h.debounced[key]
	if !ok || h.closed {
		return
	}
	delete(h.debounced, key)
	h.fanOut(key, d.url)
}

// fanOut queues a hint for every subscriber of key; h.mu is held. It never
// blocks.
func (h *Hub) fanOut(key, url string) {
	for s := range h.byRepo[key] {
		if !s.offer(key, url, h.cfg.QueueLength) {
			h.m.coalesced.Inc()
		}
	}
}

// hubSub is one subscription.
type hubSub struct {
	repos []string // normalised keys
	wake  chan struct{}

	mu       sync.Mutex
	pending  []string          // keys in arrival order
	urls     map[string]string // key → URL to send
	overflow bool
}

// offer queues a hint; it reports false when one for key was waiting.
func (s *hubSub) offer(key, url string, limit int) bool {
	s.mu.Lock()
	queued := true
	switch _, waiting := s.urls[key]; {
	case waiting:
		queued = false
	case len(s.pending) >= limit:
		s.overflow = true
	default:
		s.urls[key] = url
		s.pending = append(s.pending, key)
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return queued
}

func (s *hubSub) take() (urls []string, overflow bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range s.pending {
		urls = append(urls, s.urls[k])
	}
	s.pending, s.urls = s.pending[:0], map[string]string{}
	return urls, s.overflow
}

// ServeHTTP is the subscription endpoint: POST {"repositories": [URL...]}
// with "Authorization: Bearer <token>", answered by a text/event-stream of
// hints.
func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	if !h.authorized(r.Header.Get("Authorization")) {
		http.Error(w, "invalid bearer token", http.StatusUnauthorized)
		return
	}
	var req struct {
		Repositories []string `json:"repositories"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		http.Error(w, "body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if len(req.Repositories) == 0 || len(req.Repositories) > h.cfg.MaxRepositories {
		http.Error(w, fmt.Sprintf("subscribe to 1 to %d repositories", h.cfg.MaxRepositories), http.StatusBadRequest)
		return
	}
	s := &hubSub{wake: make(chan struct{}, 1), urls: map[string]string{}}
	seen := map[string]bool{}
	for _, u := range req.Repositories {
		key, err := gitutil.NormalizeURL(u)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if !seen[key] {
			seen[key] = true
			s.repos = append(s.repos, key)
		}
	}
	if status, msg := h.add(s); status != 0 {
		http.Error(w, msg, status)
		return
	}
	reason := h.stream(w, r, s)
	h.m.disconnects.WithLabelValues(reason).Inc() // counted before Subscribers changes
	h.remove(s)
	logr.FromContextOrDiscard(r.Context()).WithName("hub").V(1).Info("subscription ended", "reason", reason, "repositories", len(s.repos))
}

func (h *Hub) authorized(header string) bool {
	token, ok := strings.CutPrefix(header, "Bearer ")
	if !ok || token == "" {
		return false
	}
	good := false
	for _, t := range h.cfg.Tokens {
		if subtle.ConstantTimeCompare([]byte(t), []byte(token)) == 1 {
			good = true
		}
	}
	if h.cfg.TokenValidator != nil && h.cfg.TokenValidator(token) {
		good = true
	}
	return good
}

func (h *Hub) add(s *hubSub) (int, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.closed:
		return http.StatusServiceUnavailable, "shutting down"
	case len(h.subs) >= h.cfg.MaxSubscribers:
		return http.StatusServiceUnavailable, "too many subscribers"
	}
	h.subs[s] = struct{}{}
	for _, k := range s.repos {
		if h.byRepo[k] == nil {
			h.byRepo[k] = map[*hubSub]struct{}{}
		}
		h.byRepo[k][s] = struct{}{}
	}
	h.m.subscribers.Set(float64(len(h.subs)))
	h.changed()
	return 0, ""
}

func (h *Hub) remove(s *hubSub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs, s)
	for _, k := range s.repos {
		delete(h.byRepo[k], s)
		if len(h.byRepo[k]) == 0 {
			delete(h.byRepo, k)
		}
	}
	h.m.subscribers.Set(float64(len(h.subs)))
	h.changed()
}

func (h *Hub) changed() {
	close(h.gen)
	h.gen = make(chan struct{})
}

// stream writes hints to one subscriber until it leaves, the hub closes,
// the connection ages out, or it cannot keep up; it returns the reason.
func (h *Hub) stream(w http.ResponseWriter, r *http.Request, s *hubSub) string {
	rc := http.NewResponseController(w)
	write := func(msg string) error {
		_ = rc.SetWriteDeadline(time.Now().Add(h.cfg.WriteTimeout))
		if _, err := io.WriteString(w, msg); err != nil {
			return err
		}
		return rc.Flush()
	}
	closeWith := func(reason string) string {
		_ = write(fmt.Sprintf("event: close\ndata: {\"reason\": %q}\n\n", reason))
		return reason
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if err := write(": subscribed\n\n"); err != nil {
		return "write"
	}
	keepAlive := time.NewTicker(h.cfg.KeepAlive)
	defer keepAlive.Stop()
	age := time.NewTimer(h.cfg.MaxConnectionAge)
	defer age.Stop()
	for {
		select {
		case <-r.Context().Done():
			return "client"
		case <-h.done:
			return closeWith("shutdown")
		case <-age.C:
			return closeWith("max-age")
		case <-keepAlive.C:
			if err := write(": ping\n\n"); err != nil {
				return "write"
			}
		case <-s.wake:
			urls, overflow := s.take()
			if overflow {
				return closeWith("slow")
			}
			for _, u := range urls {
				data, _ := json.Marshal(map[string]string{"repository": u})
				if err := write("event: hint\ndata: " + string(data) + "\n\n"); err != nil {
					return "write"
				}
				h.m.sent.Inc()
			}
		}
	}
}
