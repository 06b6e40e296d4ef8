package gittest

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A Request is one request the server received, as [Server.Requests]
// records it.
type Request struct {
	// Time is when the server received it.
	Time time.Time
	// Repo is the repository it was for ("group/app.git"), as [Server.Counts]
	// names it.
	Repo string
	// Kind is "caps" for a version 2 capability advertisement (GET
	// info/refs with Git-Protocol: version=2), "list" for a ref listing (a
	// version 0 GET info/refs, a version 2 ls-refs command), "fetch" for
	// any other POST git-upload-pack, and "other" for the rest (a push, a
	// path git does not serve). Under [Server.SetV0Only] every GET
	// info/refs is a listing.
	Kind string
	// Status is the status code answered, recorded before the client can
	// read it; 0 until then, and when the client went away before the
	// answer.
	Status int
	// Done is when the server was done with it, its answer written; zero
	// until then.
	Done time.Time
}

// Requests returns every request the server received so far, refused ones
// too, in the order of their Time.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs)
}

// RequestsOf returns the requests for the repository at name
// ("group/app.git").
func (s *Server) RequestsOf(name string) []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	var reqs []Request
	for _, r := range s.reqs {
		if r.Repo == name {
			reqs = append(reqs, r)
		}
	}
	return reqs
}

// MaxPerSecond is the most of reqs received within any window of length
// window (a second, to compare with a forge's limit per second): a
// window starting at one request's Time holds the requests received less
// than window after it.
func MaxPerSecond(reqs []Request, window time.Duration) int {
	times := make([]time.Time, len(reqs))
	for i, r := range reqs {
		times[i] = r.Time
	}
	slices.SortFunc(times, time.Time.Compare)
	most, first := 0, 0
	for i, t := range times {
		for first <= i && t.Sub(times[first]) >= window {
			first++
		}
		most = max(most, i-first+1)
	}
	return most
}

// A LimitKind is how a [Limit] refuses requests: the answer of a public
// forge that limits a client.
type LimitKind int

const (
	// TooManyRequests is 429 Too Many Requests with Retry-After: the
	// seconds left until the limit ends, rounded up.
	TooManyRequests LimitKind = iota + 1
	// Unavailable is 503 Service Unavailable with Retry-After: the limit's
	// end as an HTTP date (rounded up to the second).
	Unavailable
	// GitHubRateLimit is GitHub's primary rate limit: 403 Forbidden with
	// X-RateLimit-Limit: 5000, X-RateLimit-Remaining: 0 and
	// X-RateLimit-Reset: the end in Unix seconds (rounded up), and the
	// body "API rate limit exceeded".
	GitHubRateLimit
	// GitLabRateLimit is GitLab's: 429 Too Many Requests with
	// RateLimit-Remaining: 0, RateLimit-Reset: the end in Unix seconds
	// (rounded up), and Retry-After in seconds, as TooManyRequests.
	GitLabRateLimit
	// BareTooManyRequests is 429 Too Many Requests with no header to say
	// when to come back.
	BareTooManyRequests
)

// A Limit makes the server refuse every request until a time, as a forge
// that limits a client does. The zero Limit refuses nothing.
type Limit struct {
	// Kind is how requests are refused.
	Kind LimitKind
	// Until is when the limit ends by itself.
	Until time.Time
}

// Limit makes the server refuse every request while l holds, whatever its
// repository, answering l.Kind's refusal instead of passing the request to
// git; Limit(Limit{}) lifts it. A request is refused when the limit holds
// as it is answered (after [Server.HoldAll] and [Server.Delay]); refused
// requests are recorded ([Server.Requests]), not counted ([Counts]).
func (s *Server) Limit(l Limit) {
	if l.Kind < 0 || l.Kind > BareTooManyRequests {
		panic(fmt.Sprintf("gittest: unknown limit kind %d", l.Kind))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limit = l
}

// Deny makes the server answer every request for the repository at name
// ("group/app.git") with code (404 Not Found, as for a repository the
// client may not see; 401 Unauthorized, with WWW-Authenticate: Basic
// realm="gittest"), instead of passing it to git; code 0 lifts it. Denied
// requests are recorded ([Server.Requests]), not counted ([Counts]).
func (s *Server) Deny(name string, code int) {
	if code != 0 && (code < 400 || code > 599) {
		panic(fmt.Sprintf("gittest: Deny with status %d, not an error", code))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if code == 0 {
		delete(s.denied, name)
		return
	}
	s.denied[name] = code
}

// HoldAll holds every request received from now on before it is answered,
// until release is called (once or more), its client goes away or the
// server stops (then it is answered 503). [Server.Held] counts those held.
func (s *Server) HoldAll() (release func()) {
	ch := make(chan struct{})
	s.mu.Lock()
	s.hold = ch
	s.mu.Unlock()
	return sync.OnceFunc(func() {
		s.mu.Lock()
		if s.hold == ch {
			s.hold = nil
		}
		s.mu.Unlock()
		close(ch)
	})
}

// Held is how many requests [Server.HoldAll] holds now.
func (s *Server) Held() int { return int(s.held.Load()) }

// Delay makes every answer to a request received from now on wait d first,
// as a slow host's, refusals too; the wait ends early when the client goes
// away or the server stops (then it is answered 503). Delay(0) lifts it.
func (s *Server) Delay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = d
}

// classify names the repository and the kind of a request (see
// [Request]); it reads the start of a version 2 POST's body, and puts it
// back.
func classify(r *http.Request) (repo, kind string) {
	v2 := strings.Contains(r.Header.Get("Git-Protocol"), "version=2")
	cut := func(suffix string) (string, bool) {
		name, ok := strings.CutSuffix(r.URL.Path, suffix)
		return strings.TrimPrefix(name, "/"), ok
	}
	if name, ok := cut("/info/refs"); ok {
		switch {
		case r.URL.Query().Get("service") != "git-upload-pack":
			return name, "other"
		case v2:
			// Version 2's is the capabilities, not refs: the ls-refs
			// command is the listing.
			return name, "caps"
		}
		return name, "list"
	}
	if name, ok := cut("/git-upload-pack"); ok {
		if r.Method != http.MethodPost {
			return name, "other"
		}
		if v2 {
			head := make([]byte, 64)
			n, _ := io.ReadFull(r.Body, head)
			head = head[:n]
			r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(head), r.Body))
			if bytes.Contains(head, []byte("command=ls-refs")) {
				return name, "list"
			}
		}
		return name, "fetch"
	}
	for _, suffix := range []string{"/git-receive-pack", "/HEAD"} {
		if name, ok := cut(suffix); ok {
			return name, "other"
		}
	}
	p := strings.TrimPrefix(r.URL.Path, "/")
	if name, _, ok := strings.Cut(p, "/objects/"); ok {
		return name, "other"
	}
	return p, "other"
}

// receive records a request received now and returns its index in
// s.reqs, with how it is to wait: the channel of the HoldAll holding it
// (nil if none; then it counts in Held until it ends waiting) and the
// delay of its answer.
func (s *Server) receive(repo, kind string) (i int, hold <-chan struct{}, delay time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, Request{Time: time.Now(), Repo: repo, Kind: kind})
	if s.hold != nil {
		s.held.Add(1)
	}
	return len(s.reqs) - 1, s.hold, s.delay
}

// answering records the status code of the i-th request.
func (s *Server) answering(i, code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs[i].Status = code
}

// done records that the i-th request is done.
func (s *Server) done(i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs[i].Done = time.Now()
}

// wait holds a request, then delays it; it reports false when the client
// went away or the server stopped first.
func (s *Server) wait(r *http.Request, hold <-chan struct{}, delay time.Duration) bool {
	done := r.Context().Done()
	if hold != nil {
		ok := false
		select {
		case <-hold:
			ok = true
		case <-done:
		case <-s.release:
		}
		s.held.Add(-1)
		if !ok {
			return false
		}
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-done:
			return false
		case <-s.release:
			return false
		}
	}
	return true
}

// refuse answers a request that a Limit or Deny refuses, and reports
// whether it did.
func (s *Server) refuse(w http.ResponseWriter, repo string) bool {
	now := time.Now()
	s.mu.Lock()
	l, code := s.limit, s.denied[repo]
	s.mu.Unlock()
	if l.Kind != 0 && now.Before(l.Until) {
		end := ceilSecond(l.Until)
		retry := strconv.FormatInt(int64((l.Until.Sub(now)+time.Second-1)/time.Second), 10)
		h := w.Header()
		switch l.Kind {
		case TooManyRequests:
			h.Set("Retry-After", retry)
			http.Error(w, "too many requests", http.StatusTooManyRequests)
		case Unavailable:
			h.Set("Retry-After", end.UTC().Format(http.TimeFormat))
			http.Error(w, "service unavailable", http.StatusServiceUnavailable)
		case GitHubRateLimit:
			h.Set("X-RateLimit-Limit", "5000")
			h.Set("X-RateLimit-Remaining", "0")
			h.Set("X-RateLimit-Reset", strconv.FormatInt(end.Unix(), 10))
			http.Error(w, "API rate limit exceeded", http.StatusForbidden)
		case GitLabRateLimit:
			h.Set("RateLimit-Remaining", "0")
			h.Set("RateLimit-Reset", strconv.FormatInt(end.Unix(), 10))
			h.Set("Retry-After", retry)
			http.Error(w, "Retry later", http.StatusTooManyRequests)
		case BareTooManyRequests:
			http.Error(w, "too many requests", http.StatusTooManyRequests)
		}
		return true
	}
	switch code {
	case 0:
		return false
	case http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Basic realm="gittest"`)
	}
	http.Error(w, http.StatusText(code), code)
	return true
}

// ceilSecond is t rounded up to the second.
func ceilSecond(t time.Time) time.Time {
	s := t.Truncate(time.Second)
	if s.Before(t) {
		s = s.Add(time.Second)
	}
	return s
}

// statusWriter records the status code of the i-th request as it is
// written.
type statusWriter struct {
	http.ResponseWriter
	s       *Server
	i       int
	written bool
}

func (w *statusWriter) record(code int) {
	if !w.written && code >= 200 {
		w.written = true
		w.s.answering(w.i, code)
	}
}

func (w *statusWriter) WriteHeader(code int) {
	w.record(code)
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	w.record(http.StatusOK)
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) Flush() {
	w.record(http.StatusOK)
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
