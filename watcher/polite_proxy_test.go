package watcher_test

import (
	"bytes"
	"errors"
	"github.com/modwatch/modwatch/watcher"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// limitProxy stands in front of a gittest server as its host: armed, the
// first fetch it sees (a POST git-upload-pack that is not ls-refs) begins
// a rate limit, a 429 with Retry-After, and every request after it is
// refused the same way and recorded.
type limitProxy struct {
	srv    *httptest.Server
	target string

	mu          sync.Mutex
	armed       bool
	failFetches int // answer every fetch with it, no limit
	until       time.Time
	refused     []string // the requests refused, the first one included
}

func newLimitProxy(t *testing.T, target string) *limitProxy {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &limitProxy{target: target}
	rp := httputil.NewSingleHostReverseProxy(u)
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetch := false
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-upload-pack") {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			fetch = !bytes.Contains(body, []byte("command=ls-refs"))
		}
		p.mu.Lock()
		if code := p.failFetches; code != 0 && fetch {
			p.mu.Unlock()
			http.Error(w, "failed", code)
			return
		}
		if p.armed && fetch && p.until.IsZero() {
			p.until = time.Now().Add(time.Minute)
		}
		limited := time.Now().Before(p.until)
		if limited {
			p.refused = append(p.refused, r.Method+" "+r.URL.String())
		}
		p.mu.Unlock()
		if limited {
			w.Header().Set("Retry-After", "60")
			http.Error(w, "too many requests", http.StatusTooManyRequests)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *limitProxy) arm() {
	p.mu.Lock()
	p.armed = true
	p.mu.Unlock()
}

func (p *limitProxy) refusedRequests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.refused...)
}

// via is a gittest URL through the proxy.
func (p *limitProxy) via(u string) string { return p.srv.URL + strings.TrimPrefix(u, p.target) }

func asRetry(err error, re **watcher.RetryError) bool { return errors.As(err, re) }
