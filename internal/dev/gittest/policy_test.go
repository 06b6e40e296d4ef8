package gittest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// pkt is s as a pkt-line.
func pkt(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }

// ask sends one request of kind ("caps", "list" in version 0, "ls-refs",
// "fetch" of want) for the repository at url, and returns the answer with
// its body read.
func ask(ctx context.Context, url, kind, want string) (*http.Response, string, error) {
	var req *http.Request
	var err error
	switch kind {
	case "caps", "list":
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, url+"/info/refs?service=git-upload-pack", nil)
	case "ls-refs":
		body := pkt("command=ls-refs\n") + "0001" + pkt("peel\n") + "0000"
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, url+"/git-upload-pack", strings.NewReader(body))
	case "fetch":
		body := pkt("command=fetch\n") + "0001" + pkt("want "+want+"\n") + pkt("done\n") + "0000"
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, url+"/git-upload-pack", strings.NewReader(body))
	default:
		err = fmt.Errorf("ask: unknown kind %q", kind)
	}
	if err != nil {
		return nil, "", err
	}
	if kind != "list" {
		req.Header.Set("Git-Protocol", "version=2")
	}
	if req.Method == http.MethodPost {
		req.Header.Set("Content-Type", "application/x-git-upload-pack-request")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// get is ask for a test that wants an answer.
func get(t *testing.T, url, kind string) (*http.Response, string) {
	t.Helper()
	resp, body, err := ask(context.Background(), url, kind, "")
	if err != nil {
		t.Fatalf("%s %s: %v", kind, url, err)
	}
	return resp, body
}

// eventually polls cond until it holds, failing t after ReentryWait.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(ReentryWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, ReentryWait)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRequestsRecordsKindsAndCodes(t *testing.T) {
	srv := NewServer(t)
	r := srv.NewRepo(t, "team/app")
	sha := r.Commit(t, "init", File("a", "1"))
	other := srv.NewRepo(t, "team/other")
	other.Commit(t, "init", File("b", "2"))

	get(t, r.URL(), "caps")
	get(t, r.URL(), "list")
	get(t, r.URL(), "ls-refs")
	resp, _, err := ask(context.Background(), r.URL(), "fetch", sha)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("fetch: %v %v", resp, err)
	}
	get(t, other.URL(), "list")
	if resp, _ := get(t, srv.URL()+"/team/none.git", "list"); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("a listing of a missing repository was answered %s", resp.Status)
	}

	want := []Request{
		{Repo: "team/app.git", Kind: "caps", Status: 200},
		{Repo: "team/app.git", Kind: "list", Status: 200},
		{Repo: "team/app.git", Kind: "list", Status: 200},
		{Repo: "team/app.git", Kind: "fetch", Status: 200},
		{Repo: "team/other.git", Kind: "list", Status: 200},
		{Repo: "team/none.git", Kind: "list", Status: 404},
	}
	got := srv.Requests()
	if len(got) != len(want) {
		t.Fatalf("%d requests recorded, want %d: %+v", len(got), len(want), got)
	}
	for i, g := range got {
		w := want[i]
		if g.Repo != w.Repo || g.Kind != w.Kind || g.Status != w.Status {
			t.Errorf("request %d is %s %s %d, want %s %s %d", i, g.Repo, g.Kind, g.Status, w.Repo, w.Kind, w.Status)
		}
		if g.Time.IsZero() || (i > 0 && g.Time.Before(got[i-1].Time)) {
			t.Errorf("request %d was received at %v, the one before it at %v", i, g.Time, got[max(i-1, 0)].Time)
		}
	}
	if of := srv.RequestsOf("team/app.git"); len(of) != 4 || of[3].Kind != "fetch" {
		t.Errorf("RequestsOf(team/app.git) = %+v, want its 4", of)
	}
	// Counting is as before.
	c := r.Counts()
	if c.Capabilities.Load() != 1 || c.Lists.Load() != 2 || c.Fetches.Load() != 1 || c.FetchBytes.Load() == 0 {
		t.Errorf("counts: %d capabilities, %d lists, %d fetches of %d bytes; want 1, 2, 1 of some",
			c.Capabilities.Load(), c.Lists.Load(), c.Fetches.Load(), c.FetchBytes.Load())
	}

	srv.SetV0Only(true)
	get(t, r.URL(), "caps")
	if got := srv.Requests(); got[len(got)-1].Kind != "list" {
		t.Errorf("a version 2 GET info/refs to a version 0 server is recorded %q, want list", got[len(got)-1].Kind)
	}
}

func TestRequestsMaxPerSecond(t *testing.T) {
	at := func(ms ...int) []Request {
		var reqs []Request
		t0 := time.Unix(1_000_000, 0)
		for _, m := range ms {
			reqs = append(reqs, Request{Time: t0.Add(time.Duration(m) * time.Millisecond)})
		}
		return reqs
	}
	for _, c := range []struct {
		ms   []int
		want int
	}{
		{nil, 0},
		{[]int{0}, 1},
		{[]int{0, 999}, 2},
		{[]int{0, 1000}, 1}, // a window is less than a second long
		{[]int{0, 100, 200, 1100, 1150, 1190, 1199, 3000}, 5},
		{[]int{2500, 0, 2000, 500, 2200, 2900}, 4}, // in any order
	} {
		if got := MaxPerSecond(at(c.ms...), time.Second); got != c.want {
			t.Errorf("MaxPerSecond(%v ms) = %d, want %d", c.ms, got, c.want)
		}
	}
}

func TestLimitShapes(t *testing.T) {
	srv := NewServer(t)
	r := srv.NewRepo(t, "team/app")
	r.Commit(t, "init", File("a", "1"))
	// An end an hour away, half a second past a second: the headers that
	// name it round it up.
	until := time.Now().Truncate(time.Second).Add(time.Hour + 500*time.Millisecond)
	reset := until.Truncate(time.Second).Add(time.Second)
	retryAfter := func(t *testing.T, h http.Header) {
		t.Helper()
		n, err := strconv.Atoi(h.Get("Retry-After"))
		if err != nil || n <= 3600-60 || n > 3601 {
			t.Errorf("Retry-After: %q, want the seconds to %v", h.Get("Retry-After"), until)
		}
	}
	unix := func(t *testing.T, h http.Header, key string) {
		t.Helper()
		if got := h.Get(key); got != strconv.FormatInt(reset.Unix(), 10) {
			t.Errorf("%s: %q, want %d", key, got, reset.Unix())
		}
	}
	for _, c := range []struct {
		name   string
		kind   LimitKind
		status int
		body   string
		check  func(t *testing.T, h http.Header)
	}{
		{"TooManyRequests", TooManyRequests, 429, "", retryAfter},
		{"Unavailable", Unavailable, 503, "", func(t *testing.T, h http.Header) {
			at, err := http.ParseTime(h.Get("Retry-After"))
			if err != nil || !at.Equal(reset) {
				t.Errorf("Retry-After: %q, want %s", h.Get("Retry-After"), reset.UTC().Format(http.TimeFormat))
			}
		}},
		{"GitHub", GitHubRateLimit, 403, "API rate limit exceeded", func(t *testing.T, h http.Header) {
			if h.Get("X-RateLimit-Limit") != "5000" || h.Get("X-RateLimit-Remaining") != "0" {
				t.Errorf("X-RateLimit-Limit: %q, X-RateLimit-Remaining: %q", h.Get("X-RateLimit-Limit"), h.Get("X-RateLimit-Remaining"))
			}
			unix(t, h, "X-RateLimit-Reset")
		}},
		{"GitLab", GitLabRateLimit, 429, "", func(t *testing.T, h http.Header) {
			if h.Get("RateLimit-Remaining") != "0" {
				t.Errorf("RateLimit-Remaining: %q", h.Get("RateLimit-Remaining"))
			}
			unix(t, h, "RateLimit-Reset")
			retryAfter(t, h)
		}},
		{"Bare", BareTooManyRequests, 429, "", func(t *testing.T, h http.Header) {
			for _, k := range []string{"Retry-After", "X-RateLimit-Reset", "RateLimit-Reset"} {
				if h.Get(k) != "" {
					t.Errorf("%s: %q, want none", k, h.Get(k))
				}
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv.Limit(Limit{Kind: c.kind, Until: until})
			before := srv.Requests()
			lists := r.Counts().Lists.Load()
			for _, kind := range []string{"caps", "list", "ls-refs"} {
				resp, body := get(t, r.URL(), kind)
				if resp.StatusCode != c.status {
					t.Fatalf("%s under the limit: %s, want %d", kind, resp.Status, c.status)
				}
				if !strings.Contains(body, c.body) {
					t.Errorf("%s under the limit: body %q, want %q in it", kind, body, c.body)
				}
				c.check(t, resp.Header)
			}
			if got := r.Counts().Lists.Load(); got != lists {
				t.Errorf("refused listings reached git: %d listings counted, want %d", got, lists)
			}
			for _, q := range srv.Requests()[len(before):] {
				if q.Status != c.status {
					t.Errorf("a refused request is recorded %+v, want status %d", q, c.status)
				}
			}
			srv.Limit(Limit{})
			if resp, _ := get(t, r.URL(), "list"); resp.StatusCode != http.StatusOK {
				t.Fatalf("after the limit was lifted: %s", resp.Status)
			}
		})
	}
}

func TestLimitEndsByItself(t *testing.T) {
	srv := NewServer(t)
	r := srv.NewRepo(t, "team/app")
	r.Commit(t, "init", File("a", "1"))
	until := time.Now().Add(1500 * time.Millisecond)
	srv.Limit(Limit{Kind: TooManyRequests, Until: until})
	refused := 0
	for {
		sent := time.Now()
		resp, _ := get(t, r.URL(), "list")
		if resp.StatusCode == http.StatusOK {
			break
		}
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("under the limit: %s", resp.Status)
		}
		if !sent.Before(until) {
			t.Fatalf("a request sent %v after the limit's end was refused", sent.Sub(until))
		}
		refused++
		if time.Since(until) > ReentryWait {
			t.Fatalf("the limit did not end within %s of its end", ReentryWait)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if now := time.Now(); now.Before(until) {
		t.Fatalf("a request was served %v before the limit's end", until.Sub(now))
	}
	if refused == 0 {
		t.Fatal("no request was refused")
	}
}

func TestDeny(t *testing.T) {
	srv := NewServer(t)
	r := srv.NewRepo(t, "team/app")
	r.Commit(t, "init", File("a", "1"))
	other := srv.NewRepo(t, "team/other")
	other.Commit(t, "init", File("b", "2"))

	srv.Deny(r.Name(), http.StatusNotFound)
	for _, kind := range []string{"caps", "list", "ls-refs", "fetch"} {
		if resp, _ := get(t, r.URL(), kind); resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s of a denied repository: %s, want 404", kind, resp.Status)
		}
	}
	if resp, _ := get(t, other.URL(), "list"); resp.StatusCode != http.StatusOK {
		t.Errorf("a listing of another repository: %s", resp.Status)
	}
	srv.Deny(r.Name(), http.StatusUnauthorized)
	resp, _ := get(t, r.URL(), "list")
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != `Basic realm="gittest"` {
		t.Errorf("a listing of a repository denied 401: %s, WWW-Authenticate: %q", resp.Status, resp.Header.Get("WWW-Authenticate"))
	}
	if c := r.Counts(); c.Lists.Load()+c.Capabilities.Load()+c.Fetches.Load() != 0 {
		t.Errorf("denied requests reached git: %d lists, %d capabilities, %d fetches", c.Lists.Load(), c.Capabilities.Load(), c.Fetches.Load())
	}
	var codes []int
	for _, q := range srv.RequestsOf(r.Name()) {
		codes = append(codes, q.Status)
	}
	if fmt.Sprint(codes) != "[404 404 404 404 401]" {
		t.Errorf("the denied requests are recorded with %v", codes)
	}
	srv.Deny(r.Name(), 0)
	if resp, _ := get(t, r.URL(), "list"); resp.StatusCode != http.StatusOK {
		t.Errorf("a listing after Deny(0): %s", resp.Status)
	}
}

func TestHoldAll(t *testing.T) {
	srv := NewServer(t)
	r := srv.NewRepo(t, "team/app")
	r.Commit(t, "init", File("a", "1"))

	release := srv.HoldAll()
	const n = 3
	answers := make(chan int, n)
	for range n {
		go func() {
			resp, _, err := ask(context.Background(), r.URL(), "list", "")
			if err != nil {
				answers <- -1
				return
			}
			answers <- resp.StatusCode
		}()
	}
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() {
		_, _, err := ask(ctx, r.URL(), "caps", "")
		gone <- err
	}()
	eventually(t, "four requests held", func() bool { return srv.Held() == n+1 })
	for _, q := range srv.Requests() {
		if q.Status != 0 || !q.Done.IsZero() {
			t.Fatalf("a held request was answered: %+v", q)
		}
	}

	// A client that goes away ends its hold.
	cancel()
	if err := <-gone; err == nil {
		t.Fatal("a held request whose client went away was answered")
	}
	eventually(t, "the abandoned request done", func() bool {
		for _, q := range srv.Requests() {
			if q.Kind == "caps" {
				return !q.Done.IsZero()
			}
		}
		return false
	})
	if got := srv.Held(); got != n {
		t.Fatalf("%d held after a client went away, want %d", got, n)
	}

	release()
	release() // again: nothing
	for range n {
		if code := <-answers; code != http.StatusOK {
			t.Fatalf("a released request was answered %d", code)
		}
	}
	if got := srv.Held(); got != 0 {
		t.Fatalf("%d held after release", got)
	}
	if resp, _ := get(t, r.URL(), "list"); resp.StatusCode != http.StatusOK {
		t.Fatalf("a request after release: %s", resp.Status)
	}
	for _, q := range srv.Requests() {
		if want := map[string]int{"caps": 0, "list": 200}[q.Kind]; q.Status != want {
			t.Errorf("%s recorded with %d, want %d", q.Kind, q.Status, want)
		}
	}
}

// TestHoldAndDelayEndWhenTheServerStops stops servers (at the end of a
// subtest) that hold or delay a request: they answer 503 and stop.
func TestHoldAndDelayEndWhenTheServerStops(t *testing.T) {
	for _, name := range []string{"Hold", "Delay"} {
		answer := make(chan int, 1)
		ReturnsWithin(t, name+": the server's stop", func() {
			t.Run(name, func(t *testing.T) {
				srv := NewServer(t)
				r := srv.NewRepo(t, "team/app")
				if name == "Hold" {
					srv.HoldAll()
				} else {
					srv.Delay(time.Hour)
				}
				go func() {
					resp, _, err := ask(context.Background(), r.URL(), "list", "")
					if err != nil {
						answer <- -1
						return
					}
					answer <- resp.StatusCode
				}()
				eventually(t, "the request received", func() bool { return len(srv.Requests()) == 1 })
			})
		})
		if code := <-answer; code != http.StatusServiceUnavailable {
			t.Errorf("%s: a request waiting as the server stopped was answered %d, want 503 (-1: no answer)", name, code)
		}
	}
}

func TestDelay(t *testing.T) {
	srv := NewServer(t)
	r := srv.NewRepo(t, "team/app")
	r.Commit(t, "init", File("a", "1"))

	srv.Delay(time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() {
		_, _, err := ask(ctx, r.URL(), "caps", "")
		gone <- err
	}()
	eventually(t, "the request received", func() bool { return len(srv.Requests()) == 1 })
	srv.Delay(0) // for the requests received from now on
	if resp, _ := get(t, r.URL(), "list"); resp.StatusCode != http.StatusOK {
		t.Fatalf("a request after Delay(0): %s", resp.Status)
	}
	if q := srv.Requests()[0]; q.Status != 0 || !q.Done.IsZero() {
		t.Fatalf("the delayed request was answered: %+v", q)
	}
	cancel()
	if err := <-gone; err == nil {
		t.Fatal("a delayed request whose client went away was answered")
	}
	eventually(t, "the abandoned request done", func() bool { return !srv.Requests()[0].Done.IsZero() })
	if q := srv.Requests()[0]; q.Status != 0 {
		t.Errorf("the abandoned request is recorded with %d, want 0", q.Status)
	}

	// A short delay delays, then answers, refusals too.
	srv.Delay(10 * time.Millisecond)
	if resp, _ := get(t, r.URL(), "list"); resp.StatusCode != http.StatusOK {
		t.Fatalf("a delayed listing: %s", resp.Status)
	}
	srv.Deny(r.Name(), http.StatusNotFound)
	if resp, _ := get(t, r.URL(), "list"); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("a delayed denied listing: %s", resp.Status)
	}
}

// TestPolicyKeepsTheGitClientWorking runs the git CLI through a server
// whose every request is recorded and delayed: it clones as before.
func TestPolicyKeepsTheGitClientWorking(t *testing.T) {
	srv := NewServer(t)
	r := srv.NewRepo(t, "team/app")
	sha := r.Commit(t, "init", File("a", "1"))
	srv.Delay(time.Millisecond)
	if got := lsRemote(t, r.URL(), "refs/heads/main"); got != sha {
		t.Fatalf("ls-remote: %q, want %s", got, sha)
	}
	if MaxPerSecond(srv.RequestsOf(r.Name()), time.Second) == 0 {
		t.Fatal("git's requests were not recorded")
	}
}
