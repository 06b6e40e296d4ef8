package gittest

import (
	"bytes"
	"encoding/pem"
	"errors"
	"log"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
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
	counts   map[string]*Counts
	stalls   map[string]int // repository → bytes of a fetch's answer before it stalls
	release  chan struct{}  // closed when the server stops: stalled answers end
}

// Counts are the requests a repository received.
type Counts struct {
	// Lists counts ref advertisements (GET info/refs?service=git-upload-pack).
	Lists atomic.Int64
	// Fetches counts pack negotiations (POST git-upload-pack).
	Fetches atomic.Int64
}

// NewServer starts a server whose repositories live in a temporary
// directory; it is stopped when the test ends.
func NewServer(t TB) *Server {
	t.Helper()
	return newServer(t, httptest.NewServer)
}

// NewTLSServer is NewServer over HTTPS, with a certificate that only
// [Server.CACert] vouches for.
func NewTLSServer(t TB) *Server {
	t.Helper()
	return newServer(t, httptest.NewTLSServer)
}

// CACert is the PEM certificate of a TLS server, to trust it.
func (s *Server) CACert() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.httpSrv.Certificate().Raw})
}

func newServer(t TB, start func(http.Handler) *httptest.Server) *Server {
	backend, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatalf("gittest: git is needed on PATH: %v", err)
	}
	s := &Server{root: t.TempDir(), counts: map[string]*Counts{}, stalls: map[string]int{}, release: make(chan struct{})}
	h := &cgi.Handler{
		Path: filepath.Join(strings.TrimSpace(string(backend)), "git-http-backend"),
		Env: []string{
			"GIT_PROJECT_ROOT=" + s.root,
			"GIT_HTTP_EXPORT_ALL=1",
			"GIT_CONFIG_NOSYSTEM=1",
			"HOME=" + s.root,
			"GIT_CONFIG_COUNT=2",
			"GIT_CONFIG_KEY_0=uploadpack.allowAnySHA1InWant", "GIT_CONFIG_VALUE_0=true",
			"GIT_CONFIG_KEY_1=uploadpack.allowFilter", "GIT_CONFIG_VALUE_1=true",
		},
		Logger: log.New(quietStalls{}, "", log.LstdFlags),
	}
	s.httpSrv = start(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		user, pass, down := s.user, s.password, s.down
		s.mu.Unlock()
		if down {
			http.Error(w, "down for the test", http.StatusServiceUnavailable)
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
		s.count(r)
		if after, ok := s.stallOf(r); ok {
			w = &stallWriter{ResponseWriter: w, left: after, done: r.Context().Done(), release: s.release}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(s.httpSrv.Close)
	t.Cleanup(func() { close(s.release) }) // before Close, which waits for handlers
	return s
}

// Stall makes every fetch (POST git-upload-pack) of the repository at name
// send after bytes of its answer and then hang, sending nothing more until
// the client goes away or the server stops; a negative after ends it.
func (s *Server) Stall(name string, after int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if after < 0 {
		delete(s.stalls, name)
		return
	}
	s.stalls[name] = after
}

func (s *Server) stallOf(r *http.Request) (int, bool) {
	name, ok := strings.CutSuffix(strings.TrimPrefix(r.URL.Path, "/"), "/git-upload-pack")
	if !ok || r.Method != http.MethodPost {
		return 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	after, ok := s.stalls[name]
	return after, ok
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
	}
	return 0, errStalled
}

func (s *Server) count(r *http.Request) {
	p := r.URL.Path
	var repo string
	var list bool
	switch {
	case strings.HasSuffix(p, "/info/refs") && r.URL.Query().Get("service") == "git-upload-pack":
		repo, list = strings.TrimSuffix(p, "/info/refs"), true
	case strings.HasSuffix(p, "/git-upload-pack") && r.Method == http.MethodPost:
		repo = strings.TrimSuffix(p, "/git-upload-pack")
	default:
		return
	}
	c := s.Counts(strings.TrimPrefix(repo, "/"))
	if list {
		c.Lists.Add(1)
	} else {
		c.Fetches.Add(1)
	}
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
	}
	if p, ok := os.LookupEnv("PATH"); ok {
		env = append(env, "PATH="+p)
	}
	return env
}
