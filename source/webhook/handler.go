package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/watcher/signature"
)

// Triggerer is what a hint is given to; *watcher.Watcher is one.
type Triggerer interface {
	// Trigger asks for a poll of repoURL now and reports whether it is
	// watched.
	Trigger(repoURL string) bool
}

// Config holds the secrets of the providers to accept and the limits. A
// provider without a secret is not accepted: an unsigned webhook never
// triggers anything.
type Config struct {
	// GitHubSecret verifies X-Hub-Signature-256.
	GitHubSecret string `json:"githubSecret,omitempty"`
	// GitLabToken is compared with X-Gitlab-Token.
	GitLabToken string `json:"gitlabToken,omitempty"`
	// GiteaSecret verifies X-Gitea-Signature (Gitea) and X-Forgejo-Signature
	// (Forgejo).
	GiteaSecret string `json:"giteaSecret,omitempty"`
	// GogsSecret verifies X-Gogs-Signature.
	GogsSecret string `json:"gogsSecret,omitempty"`
	// BitbucketSecret verifies X-Hub-Signature from Bitbucket Cloud and
	// Bitbucket Server / Data Center.
	BitbucketSecret string `json:"bitbucketSecret,omitempty"`
	// GenericSecret verifies X-Signature ("sha256=<hex HMAC-SHA256 of the
	// body>") on a body of {"repository": URL} or {"repositories": [URL...]}.
	GenericSecret string `json:"genericSecret,omitempty"`
	// MaxBodyBytes caps a request body (default 1 MiB); larger is 413.
	MaxBodyBytes int64 `json:"maxBodyBytes,omitempty"`
	// MaxURLs caps the distinct repository URLs one payload may name
	// (default 1000); a payload naming more is refused (400) before any is
	// triggered.
	MaxURLs int `json:"maxURLs,omitempty"`
	// MinInterval is the shortest time between two hints for one
	// repository (default 1s); hints in between are coalesced into one at
	// the end of the interval.
	MinInterval time.Duration `json:"minInterval,omitempty"`
}

// Default fills in the limits left at zero.
func (c *Config) Default() {
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 1 << 20
	}
	if c.MinInterval == 0 {
		c.MinInterval = time.Second
	}
	if c.MaxURLs == 0 {
		c.MaxURLs = 1000
	}
}

// ErrNoSecret is returned by Validate when no provider has a secret.
var ErrNoSecret = errors.New("webhook: no provider has a secret; configure at least one")

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.GitHubSecret == "" && c.GitLabToken == "" && c.GiteaSecret == "" && c.GogsSecret == "" &&
		c.BitbucketSecret == "" && c.GenericSecret == "" {
		return ErrNoSecret
	}
	if c.MaxBodyBytes < 0 || c.MinInterval < 0 || c.MaxURLs < 0 {
		return errors.New("webhook: maxBodyBytes, maxURLs and minInterval cannot be negative")
	}
	return nil
}

// Handler receives provider webhooks and triggers polls.
type Handler struct {
	cfg       Config
	providers []provider
	limiter   *limiter

	mu       sync.Mutex
	refusals map[refusal]bool // logged already
}

// refusal is a cause of refusing a webhook, from one sender: each is
// logged once (a sender retrying, or flooding, adds no line).
type refusal struct{ provider, cause, sender string }

// maxRefusals bounds the refusals remembered; past it, they are forgotten
// (and logged again).
const maxRefusals = 1024

var _ http.Handler = (*Handler)(nil)

// New returns a handler that gives hints to t, configured by cfg alone.
// It logs to its requests' context (a server's BaseContext).
func New(cfg Config, t Triggerer) (*Handler, error) {
	cfg.Default()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	h := &Handler{cfg: cfg, refusals: map[refusal]bool{}}
	h.limiter = newLimiter(cfg.MinInterval, t)
	h.providers = providers(cfg)
	return h, nil
}

// Close stops hints that wait for the end of their repository's interval.
func (h *Handler) Close() { h.limiter.close() }

// ServeHTTP verifies the request, answers at once, and triggers a poll for
// every watched URL of the pushed repository.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	p, disabled := h.detect(r.Header)
	if p == nil {
		if disabled != "" {
			h.refuse(w, r, http.StatusForbidden, disabled, "this provider is not enabled")
		} else {
			h.refuse(w, r, http.StatusBadRequest, "", "not a webhook of a known provider")
		}
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			h.refuse(w, r, http.StatusRequestEntityTooLarge, p.name, "body too large")
			return
		}
		http.Error(w, "cannot read body", http.StatusBadRequest)
		return
	}
	if status, err := p.verify(r.Header, body); err != nil {
		h.refuse(w, r, status, p.name, err.Error())
		return
	}
	event := r.Header.Get(p.eventHeader)
	if !p.handles(event) {
		w.WriteHeader(http.StatusOK)
		fmt.Fprintf(w, "ignored %s event %q\n", p.name, event)
		return
	}
	urls, err := p.urls(body)
	if err == nil && len(urls) > h.cfg.MaxURLs {
		err = fmt.Errorf("%d repository URLs, more than the limit of %d", len(urls), h.cfg.MaxURLs)
	}
	if err != nil {
		http.Error(w, fmt.Sprintf("%s payload: %v", p.name, err), http.StatusBadRequest)
		return
	}
	hinted := h.hint(urls)
	logr.FromContextOrDiscard(r.Context()).WithName("webhook").V(1).Info("push hint", "provider", p.name, "event", event, "urls", urls, "watched", hinted)
	w.WriteHeader(http.StatusAccepted)
	if hinted {
		fmt.Fprintln(w, "poll scheduled")
	} else {
		fmt.Fprintln(w, "repository not watched")
	}
}

// hint triggers each URL (rate-limited); it reports whether any is watched.
func (h *Handler) hint(urls []string) bool {
	seen := make(map[string]bool, len(urls))
	any := false
	for _, u := range urls {
		key, err := gitutil.NormalizeURL(u)
		if err != nil || seen[key] {
			continue
		}
		seen[key] = true
		if h.limiter.hint(key, u) {
			any = true
		}
	}
	return any
}

// detect finds the provider of a request: the first, most specific, whose
// event header is present and whose secret is set. known reports whether
// any provider's header was present.
func (h *Handler) detect(hdr http.Header) (p *provider, disabled string) {
	for i := range h.providers {
		q := &h.providers[i]
		if hdr.Get(q.eventHeader) == "" {
			continue
		}
		if q.enabled {
			return q, ""
		}
		if disabled == "" {
			disabled = q.name
		}
	}
	return nil, disabled
}

// refuse answers status with cause, and logs the refusal the first time
// this sender (its address, without the port) gets it for this cause.
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, status int, provider, cause string) {
	sender, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		sender = r.RemoteAddr
	}
	key := refusal{provider, cause, sender}
	h.mu.Lock()
	first := !h.refusals[key]
	if first {
		if len(h.refusals) >= maxRefusals {
			clear(h.refusals)
		}
		h.refusals[key] = true
	}
	h.mu.Unlock()
	if first {
		logr.FromContextOrDiscard(r.Context()).WithName("webhook").Info("refused webhook (logged once per cause and sender)",
			"provider", provider, "reason", cause, "status", status, "remote", sender)
	}
	http.Error(w, cause, status)
}

// Sign returns the X-Signature header value of a generic webhook:
// "sha256=" and the hex HMAC-SHA256 of body keyed by secret. It is the form
// of GitHub's X-Hub-Signature-256, of the X-Signature that Flux's
// generic-hmac Receiver checks (sink/fluxreceiver sends it) and of what
// [Config.GenericSecret] verifies. It is [signature.HMAC], named where a
// sender of hints looks for it.
func Sign(secret string, body []byte) string { return signature.HMAC(secret, body) }

// verifyHMAC checks a hex HMAC-SHA256 of body, with an optional prefix
// ("sha256=").
func verifyHMAC(secret, got, prefix string, body []byte) (int, error) {
	if got == "" {
		return http.StatusUnauthorized, errors.New("missing signature")
	}
	sig, ok := strings.CutPrefix(got, prefix)
	if !ok {
		return http.StatusForbidden, errors.New("malformed signature")
	}
	want := hmac.New(sha256.New, []byte(secret))
	want.Write(body)
	raw, err := hex.DecodeString(strings.TrimSpace(sig))
	if err != nil || !hmac.Equal(raw, want.Sum(nil)) {
		return http.StatusForbidden, errors.New("signature does not match")
	}
	return 0, nil
}

// verifyToken compares a shared token in constant time.
func verifyToken(secret, got string) (int, error) {
	if got == "" {
		return http.StatusUnauthorized, errors.New("missing token")
	}
	if subtle.ConstantTimeCompare([]byte(secret), []byte(got)) != 1 {
		return http.StatusForbidden, errors.New("token does not match")
	}
	return 0, nil
}
