package gittest

import (
	"bytes"
	"encoding/pem"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Server is a git smart-HTTP server on loopback serving every bare
// repository under its root.
type Server struct {
	root    string
	httpSrv *httptest.Server

	mu       sync.Mutex
	user     string
	password string
	down     bool
	v0Only   bool
	noFilter bool
	counts   map[string]*Counts
	conns    atomic.Int64
	stalls   map[string]stall // by repository
	release  chan struct{}    // closed when the server stops: stalled answers end

	// The policy (policy.go).
	reqs   []Request
	limit  Limit
	denied map[string]int // status codes by repository
	hold   chan struct{}  // closed when HoldAll's release is called
	held   atomic.Int64
	delay  time.Duration
}

// Counts are the requests a repository received and passed to git: those
// refused (by [Server.Limit], [Server.Deny], [Server.SetDown] or basic
// auth) are only in [Server.Requests].
type Counts struct {
	// Lists counts ref listings: version 0 advertisements (GET
	// info/refs?service=git-upload-pack) and version 2 ls-refs commands.
	Lists atomic.Int64
	// ListBytes counts the bytes of the listings' answers (bodies).
	ListBytes atomic.Int64
	// Capabilities counts version 2 capability advertisements (GET
	// info/refs with Git-Protocol: version=2).
	Capabilities atomic.Int64
	// Fetches counts pack negotiations (POST git-upload-pack, but for
	// ls-refs).
	Fetches atomic.Int64
	// FetchBytes counts the bytes of the fetches' answers (bodies).
	FetchBytes atomic.Int64
}

// NewServer starts a server whose repositories live in a temporary
// directory; it is stopped when the test ends.
func NewServer(t TB) *Server {
	t.Helper()
	return newServer(t, (*httptest.Server).Start)
}

// NewTLSServer is NewServer over HTTPS, with a certificate that only
// [Server.CACert] vouches for.
func NewTLSServer(t TB) *Server {
	t.Helper()
	return newServer(t, (*httptest.Server).StartTLS)
}

// CACert is the PEM certificate of a TLS server, to trust it.
func (s *Server) CACert() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.httpSrv.Certificate().Raw})
}

func newServer(t TB, start func(*httptest.Server)) *Server {
	backend, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatalf("gittest: git is needed on PATH: %v", err)
	}
	s := &Server{root: t.TempDir(), counts: map[string]*Counts{}, stalls: map[string]stall{}, denied: map[string]int{}, release: make(chan struct{})}
	handler := func(filters bool) *cgi.Handler {
		return &cgi.Handler{
			Path: filepath.Join(strings.TrimSpace(string(backend)), "git-http-backend"),
			Env: []string{
				"GIT_PROJECT_ROOT=" + s.root,
				"GIT_HTTP_EXPORT_ALL=1",
				"GIT_CONFIG_NOSYSTEM=1",
				"HOME=" + s.root,
				"GIT_CONFIG_COUNT=2",
				"GIT_CONFIG_KEY_0=uploadpack.allowAnySHA1InWant", "GIT_CONFIG_VALUE_0=true",
				"GIT_CONFIG_KEY_1=uploadpack.allowFilter", fmt.Sprint("GIT_CONFIG_VALUE_1=", filters),
			},
			Logger: log.New(quietStalls{}, "", log.LstdFlags),
		}
	}
	withFilters, withoutFilters := handler(true), handler(false)
	s.httpSrv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		v0Only := s.v0Only
		s.mu.Unlock()
		if v0Only {
			r.Header.Del("Git-Protocol")
		}
		repo, kind := classify(r)
		i, hold, delay := s.receive(repo, kind)
		defer s.done(i)
		w = &statusWriter{ResponseWriter: w, s: s, i: i}
		if !s.wait(r, hold, delay) {
			select {
			case <-s.release:
				http.Error(w, "gittest: the server stopped", http.StatusServiceUnavailable)
			default: // the client went away
			}
			return
		}
		s.mu.Lock()
		user, pass, down, h := s.user, s.password, s.down, withFilters
		if s.noFilter {
			h = withoutFilters
		}
		s.mu.Unlock()
		if down {
			http.Error(w, "down for the test", http.StatusServiceUnavailable)
			return
		}
		if s.refuse(w, repo) {
			return
		}
		if user != "" {
			u, p, ok := r.BasicAuth()
			if !ok || u != user || p != pass {
				w.Header().Set("WWW-Authenticate", `Basic realm="gittest"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
		}
		answerBytes, fetch := s.count(repo, kind)
		if answerBytes != nil {
			w = countingWriter{w, answerBytes}
		}
		if st, ok := s.stallOf(r); ok && fetch {
			w = &stallWriter{ResponseWriter: w, left: st.after, done: r.Context().Done(), release: s.release, ended: st.ended}
		}
		h.ServeHTTP(w, r)
	}))
	s.httpSrv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	start(s.httpSrv)
	t.Cleanup(s.httpSrv.Close)
	t.Cleanup(func() { close(s.release) }) // before Close, which waits for handlers
	return s
}

// SetFilters says whether the server allows the filters of partial
// clones (uploadpack.allowFilter; the default, as GitHub and GitLab).
func (s *Server) SetFilters(allowed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noFilter = !allowed
}

// SetV0Only makes the server answer in git's protocol version 0 only, as
// servers that do not know version 2 do.
func (s *Server) SetV0Only(v0 bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.v0Only = v0
}

// stall is how a repository's fetches stall.
type stall struct {
	after int           // bytes of a fetch's answer before it stalls
	ended chan struct{} // closed when the stall ends
}

// Stall makes every fetch (POST git-upload-pack) of the repository at name
// send after bytes of its answer and then hang, sending nothing more until
// the client goes away, the stall ends or the server stops. A negative
// after ends the stall: the answers that hang end there, cut (the client
// sees a failed fetch), and later fetches are answered whole.
func (s *Server) Stall(name string, after int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.stalls[name]
	if after < 0 {
		if ok {
			close(st.ended)
			delete(s.stalls, name)
		}
		return
	}
	if !ok {
		st.ended = make(chan struct{})
	}
	st.after = after
	s.stalls[name] = st
}

func (s *Server) stallOf(r *http.Request) (stall, bool) {
	name, ok := strings.CutSuffix(strings.TrimPrefix(r.URL.Path, "/"), "/git-upload-pack")
	if !ok || r.Method != http.MethodPost {
		return stall{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.stalls[name]
	return st, ok
}

// quietStalls passes the CGI handler's log to stderr, but for the copy
// errors of the answers Stall cut.
type quietStalls struct{}

func (quietStalls) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(errStalled.Error())) {
		return len(p), nil
	}
	return os.Stderr.Write(p)
}

var errStalled = errors.New("gittest: stalled")

// stallWriter passes on left bytes, then blocks.
type stallWriter struct {
	http.ResponseWriter
	left    int
	done    <-chan struct{}
	release <-chan struct{}
	ended   <-chan struct{}
}

func (w *stallWriter) Write(p []byte) (int, error) {
	if w.left > 0 {
		n := min(w.left, len(p))
		w.left -= n
		k, err := w.ResponseWriter.Write(p[:n])
		if f, ok := w.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
		if err != nil || n == len(p) {
			return k, err
		}
	}
	select {
	case <-w.done:
	case <-w.release:
	case <-w.ended:
	}
	return 0, errStalled
}

// count counts a request (named by classify), and returns the counter of
// the bytes of its answer when it is a ref listing or a fetch (nil
// otherwise), and whether it is a fetch.
func (s *Server) count(repo, kind string) (*atomic.Int64, bool) {
	switch kind {
	case "list":
		c := s.Counts(repo)
		c.Lists.Add(1)
		return &c.ListBytes, false
	case "caps":
		s.Counts(repo).Capabilities.Add(1)
	case "fetch":
		c := s.Counts(repo)
		c.Fetches.Add(1)
		return &c.FetchBytes, true
	}
	return nil, false
}

// countingWriter adds what it writes to n.
type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (w countingWriter) Write(p []byte) (int, error) {
	k, err := w.ResponseWriter.Write(p)
	w.n.Add(int64(k))
	return k, err
}

// Counts returns the request counters of the repository at name
// ("group/app.git").
func (s *Server) Counts(name string) *Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.counts[name]
	if !ok {
		c = &Counts{}
		s.counts[name] = c
	}
	return c
}

// Connections counts the TCP connections clients have opened to the
// server so far.
func (s *Server) Connections() int64 { return s.conns.Load() }

// URL is the server's base URL ("http://127.0.0.1:port").
func (s *Server) URL() string { return s.httpSrv.URL }

// Root is the directory holding the bare repositories.
func (s *Server) Root() string { return s.root }

// SetBasicAuth makes every request need these credentials ("" turns auth
// off).
func (s *Server) SetBasicAuth(user, password string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.user, s.password = user, password
}

// SetDown makes every request fail with 503 while down is true.
func (s *Server) SetDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
}

// gitEnv is a deterministic environment for the git CLI.
func gitEnv(home string) []string {
	env := []string{
		"HOME=" + home,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=gittest", "GIT_AUTHOR_EMAIL=gittest@example.com",
		"GIT_COMMITTER_NAME=gittest", "GIT_COMMITTER_EMAIL=gittest@example.com",
		"GIT_TERMINAL_PROMPT=0",
		// A commit may start git gc --auto; detached, it would still be
		// writing in the repository when the test's cleanup removes it.
		"GIT_CONFIG_COUNT=2",
		"GIT_CONFIG_KEY_0=gc.autoDetach", "GIT_CONFIG_VALUE_0=false",
		"GIT_CONFIG_KEY_1=maintenance.autoDetach", "GIT_CONFIG_VALUE_1=false",
	}
	if p, ok := os.LookupEnv("PATH"); ok {
		env = append(env, "PATH="+p)
	}
	return env
}
