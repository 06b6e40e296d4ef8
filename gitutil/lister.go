package gitutil

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"

	"github.com/modwatch/modwatch/gitutil/internal/lru"
	"github.com/modwatch/modwatch/gitutil/internal/protov2"
)

// What a Lister remembers, at most: the bounds of its caches.
const (
	// MaxListerRepos bounds the repositories a Lister remembers as
	// listed in protocol version 2 (each its parsed request).
	MaxListerRepos = 4096
	// MaxListerServers bounds the servers (scheme and host) whose
	// protocol version and fetch features a Lister remembers.
	MaxListerServers = 1024
	// MaxListerClients bounds the HTTP clients a Lister keeps, one per
	// TLS and proxy setting, with their idle connections.
	MaxListerClients = 64
)

// Lister lists remotes' refs ([Lister.ListRefs]) and keeps what it learned
// of their servers: which speak git's protocol version 2 (asked once per
// server), the parsed request of each repository listed so, the features
// of their fetch command, and its HTTP clients, whose connections later
// listings reuse. It remembers at most [MaxListerRepos] repositories,
// [MaxListerServers] servers and [MaxListerClients] clients, forgetting the
// least recently used. A program holds one per component that lists (a
// watcher holds its own); a mirror shares its lister's knowledge
// (gitutil/mirror's Options.Lister). It is safe for concurrent use.
type Lister struct {
	noV2      *lru.Cache[string, struct{}]     // servers that answered in version 0 or 1
	v2Servers *lru.Cache[string, struct{}]     // servers that listed in version 2
	repos     *lru.Cache[string, *v2Repo]      // repositories listed in version 2, by URL
	features  *lru.Cache[string, string]       // the features of a version 2 server's fetch
	clients   *lru.Cache[string, *http.Client] // by TLS and proxy setting
	limitsMu  sync.Mutex
	limits    map[string]*RateLimitError // hosts' rate limits, by host: see NoteLimit
	header    http.Header                // lsRefsHeader, shared and never written
	maxLimits int
}

// NewLister returns a Lister that knows nothing yet.
func NewLister() *Lister {
	return newLister(MaxListerRepos, MaxListerServers, MaxListerClients)
}

// newLister is NewLister with other bounds.
func newLister(repos, servers, clients int) *Lister {
	return &Lister{
		noV2:      lru.New[string, struct{}](servers, nil),
		v2Servers: lru.New[string, struct{}](servers, nil),
		repos:     lru.New[string, *v2Repo](repos, nil),
		features:  lru.New[string, string](servers, nil),
		clients:   lru.New(clients, func(_ string, c *http.Client) { c.CloseIdleConnections() }),
		limits:    map[string]*RateLimitError{},
		maxLimits: servers,
		header:    lsRefsHeader(),
	}
}

// CloseIdleConnections closes the connections l's clients keep for the
// next request.
func (l *Lister) CloseIdleConnections() {
	for _, c := range l.clients.Values() {
		c.CloseIdleConnections()
	}
}

// HostLimit returns the rate limit host answered with that still holds
// (see [RateLimitError]); nil when none does. A Lister sends no request to
// a host while its limit holds: it returns the limit instead.
func (l *Lister) HostLimit(host string) error {
	l.limitsMu.Lock()
	defer l.limitsMu.Unlock()
	rl, ok := l.limits[host]
	if !ok || !time.Now().Before(rl.Until) {
		return nil
	}
	return rl
}

// NoteLimit remembers the rate limit err carries, if any, for its host
// (see [Lister.HostLimit]): one a request that went elsewhere than l's
// clients was answered with (go-git's, the git CLI's). It remembers
// [MaxListerServers] hosts' limits at most: past that, those that ended
// are forgotten, then the one that ends first (a flood of hosts named by
// submodules does not push out a limit that holds longer).
func (l *Lister) NoteLimit(err error) {
	var rl *RateLimitError
	if !errors.As(err, &rl) || rl.Host == "" {
		return
	}
	l.limitsMu.Lock()
	defer l.limitsMu.Unlock()
	old, ok := l.limits[rl.Host]
	if ok && old.Until.After(rl.Until) {
		return
	}
	if !ok && len(l.limits) >= l.maxLimits {
		l.dropLimit(time.Now())
	}
	l.limits[rl.Host] = rl
}

// dropLimit forgets the limits that ended, or else the one that ends
// first; l.limitsMu is held.
func (l *Lister) dropLimit(now time.Time) {
	first := ""
	for host, rl := range l.limits {
		if !now.Before(rl.Until) {
			delete(l.limits, host)
		} else if first == "" || rl.Until.Before(l.limits[first].Until) {
			first = host
		}
	}
	if len(l.limits) >= l.maxLimits {
		delete(l.limits, first)
	}
}

// SpeaksV2 reports whether a listing of l found the server of repoURL
// speaking protocol version 2 over HTTP(S).
func (l *Lister) SpeaksV2(repoURL string) bool {
	e, err := ParseURL(repoURL)
	if err != nil {
		return false
	}
	_, ok := l.v2Servers.Get(e.Scheme + "://" + e.Host)
	return ok
}

// AllowsFilter reports whether the remote at repoURL speaks protocol
// version 2 over HTTP(S) and its fetch takes a filter
// (uploadpack.allowFilter), asking its server once. (A repository of that
// server configured otherwise refuses a filtered fetch.) t is how the
// remote is reached ([Auth.Transport]).
func (l *Lister) AllowsFilter(ctx context.Context, repoURL string, t Transport) (bool, error) {
	base := strings.TrimSuffix(repoURL, "/")
	e, err := ParseURL(repoURL)
	if err != nil {
		return false, err
	}
	server := e.Scheme + "://" + e.Host
	if f, ok := l.features.Get(server); ok {
		return protov2.HasFeature(f, "filter"), nil
	}
	if err := l.HostLimit(e.Host); err != nil {
		return false, err
	}
	client, err := l.client(t)
	if err != nil {
		return false, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/info/refs?service=git-upload-pack", nil)
	if err != nil {
		return false, err
	}
	setV2Headers(req, t.Auth)
	resp, err := client.Do(req)
	if err != nil {
		return false, err
	}
	caps, err := readV2Caps(resp, e.Host)
	l.NoteLimit(err)
	if errors.Is(err, protov2.ErrNoV2) {
		l.features.Add(server, "")
		return false, nil
	}
	if err != nil {
		return false, err
	}
	features, ok := caps["fetch"]
	if !ok {
		features = ""
	}
	l.features.Add(server, features)
	return protov2.HasFeature(features, "filter"), nil
}

// UploadPack sends one protocol version 2 fetch command (request, in
// pkt-lines) to the git-upload-pack of the remote at repoURL over HTTP(S),
// on l's connections, and returns the answer's body, which the caller
// closes. An answer other than 200 OK is an error. t is how the remote is
// reached ([Auth.Transport]).
func (l *Lister) UploadPack(ctx context.Context, repoURL string, t Transport, request []byte) (io.ReadCloser, error) {
	host := hostOf(repoURL)
	if err := l.HostLimit(host); err != nil {
		return nil, err
	}
	client, err := l.client(t)
	if err != nil {
		return nil, err
	}
	base := strings.TrimSuffix(repoURL, "/")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/git-upload-pack", bytes.NewReader(request))
	if err != nil {
		return nil, err
	}
	setV2Headers(req, t.Auth)
	req.Header.Set("Content-Type", "application/x-git-upload-pack-request")
	req.Header.Set("Accept", "application/x-git-upload-pack-result")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		err := statusError(resp, host, "fetch")
		l.NoteLimit(err)
		return nil, err
	}
	return resp.Body, nil
}

// hostOf is the host of repoURL, or "" when it does not parse.
func hostOf(repoURL string) string {
	e, err := ParseURL(repoURL)
	if err != nil {
		return ""
	}
	return e.Host
}

// maxIdlePerServer is how many idle connections to one server the
// listings keep for the next poll.
const maxIdlePerServer = 32

// client returns l's HTTP client of version 2 requests with t's TLS and
// proxy settings, one per setting, so that polls reuse their connections.
func (l *Lister) client(t Transport) (*http.Client, error) {
	px := t.Proxy
	key := "" // the default settings: no key to compute on every poll
	if len(t.CABundle) > 0 || t.InsecureSkipTLS || px != (transport.ProxyOptions{}) {
		key = fmt.Sprintf("%x/%t/%x", sha256.Sum256(t.CABundle), t.InsecureSkipTLS,
			sha256.Sum256(fmt.Appendf(nil, "%d:%s%d:%s%d:%s", len(px.URL), px.URL, len(px.Username), px.Username, len(px.Password), px.Password)))
	}
	if c, ok := l.clients.Get(key); ok {
		return c, nil
	}
	c, err := newClient(t)
	if err != nil {
		return nil, err
	}
	return l.clients.AddIfAbsent(key, c), nil
}

// newClient is an HTTP client with t's TLS and proxy settings.
func newClient(t Transport) (*http.Client, error) {
	px := t.Proxy
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// A watcher lists up to 16 remotes at once (and fetches 4), most of
	// them on one forge: net/http keeps 2 idle connections per host, so
	// each cycle would open a connection for most listings, and leave it
	// in TIME_WAIT, whose number grows with the remotes.
	tr.MaxIdleConnsPerHost = maxIdlePerServer
	if px.URL != "" {
		u, err := px.FullURL()
		if err != nil {
			return nil, fmt.Errorf("%w: proxy URL", ErrInvalidAuth)
		}
		tr.Proxy = http.ProxyURL(u)
	}
	if len(t.CABundle) > 0 || t.InsecureSkipTLS {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: t.InsecureSkipTLS} //nolint:gosec // opted in by the caller
		if len(t.CABundle) > 0 {
			pool, err := x509.SystemCertPool()
			if err != nil {
				pool = x509.NewCertPool()
			}
			if !pool.AppendCertsFromPEM(t.CABundle) {
				return nil, fmt.Errorf("%w: CA bundle holds no certificate", ErrInvalidAuth)
			}
			cfg.RootCAs = pool
		}
		tr.TLSClientConfig = cfg
	}
	// Redirects are not followed: credentials must not travel elsewhere.
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}, nil
}
