package gittest

import (
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy is a forward HTTP proxy on loopback that asks for basic
// credentials: plain http requests are forwarded, https ones tunnelled
// with CONNECT. It counts what it let through and what it refused.
type Proxy struct {
	// Passed counts the requests and tunnels it let through; Refused those
	// without the right Proxy-Authorization.
	Passed, Refused atomic.Int64

	srv   *httptest.Server
	want  string
	mu    sync.Mutex
	conns []net.Conn
}

// NewProxy starts a proxy that wants user and password; it is stopped,
// with its tunnels, when the test ends.
func NewProxy(t TB, user, password string) *Proxy {
	t.Helper()
	p := &Proxy{want: "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))}
	fwd := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.Out.URL = r.In.URL }}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Proxy-Authorization") != p.want {
			p.Refused.Add(1)
			w.Header().Set("Proxy-Authenticate", `Basic realm="proxy"`)
			http.Error(w, "proxy authentication required", http.StatusProxyAuthRequired)
			return
		}
		p.Passed.Add(1)
		if r.Method != http.MethodConnect {
			fwd.ServeHTTP(w, r)
			return
		}
		p.tunnel(w, r)
	}))
	t.Cleanup(p.close)
	return p
}

// URL is the proxy's address, "http://127.0.0.1:port".
func (p *Proxy) URL() string { return p.srv.URL }

func (p *Proxy) tunnel(w http.ResponseWriter, r *http.Request) {
	up, err := net.DialTimeout("tcp", r.Host, 10*time.Second)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	down, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		up.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, up, down)
	p.mu.Unlock()
	if _, err := io.WriteString(down, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		up.Close()
		down.Close()
		return
	}
	go func() { _, _ = io.Copy(up, down); up.Close() }()
	go func() { _, _ = io.Copy(down, up); down.Close() }()
}

func (p *Proxy) close() {
	p.srv.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}
