package gitutil

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
)

// ErrRateLimited is what every [RateLimitError] is (errors.Is): a host
// said to stop sending requests for a while.
var ErrRateLimited = errors.New("gitutil: rate limited")

// The bounds of a rate limit's wait, whatever the host says.
const (
	// MaxRateLimitWait bounds how long a host's answer may stop requests
	// to it: an hour, the longest window of the forges' published limits
	// (GitHub's primary limit resets hourly). A later end, a date far
	// away or a hostile header, is cut to it.
	MaxRateLimitWait = time.Hour
	// DefaultRateLimitWait is the wait of a 429 that says nothing of when
	// to come back: GitHub's documentation asks for at least a minute.
	DefaultRateLimitWait = time.Minute
	// minRateLimitWait is the least wait of a rate limit, whose end may be
	// in the past by the client's clock.
	minRateLimitWait = time.Second
)

// RateLimitError is a host's answer that no request is welcome before
// Until: a 429 Too Many Requests, a 503 Service Unavailable with
// Retry-After, or a 403 Forbidden saying no request remains (GitHub's
// X-RateLimit-Remaining: 0 with X-RateLimit-Reset, GitLab's
// RateLimit-Remaining and RateLimit-Reset) or with Retry-After (GitHub's
// secondary limits). See [ParseRateLimit].
type RateLimitError struct {
	// Host is the host that answered (Endpoint.Host).
	Host string
	// Code is the answer's HTTP status.
	Code int
	// Until is when the host takes requests again.
	Until time.Time
}

func (e *RateLimitError) Error() string {
	return fmt.Sprintf("rate limited by %s (HTTP %d) until %s", e.Host, e.Code, e.Until.UTC().Format(time.RFC3339))
}

// Is makes a RateLimitError an [ErrRateLimited].
func (e *RateLimitError) Is(target error) bool { return target == ErrRateLimited }

// ParseRateLimit reads an HTTP answer's status and headers, received at
// now, as a rate limit: ok, and when it ends. A 429 is one, until its
// Retry-After, its reset, or [DefaultRateLimitWait] from now; a 503 or a
// 403 is one only when it says when to come back (a 503 without is an
// outage, a 403 without is a refusal). The end is at least a second from
// now and at most [MaxRateLimitWait].
//
// Retry-After is seconds or an HTTP date; a reset (X-RateLimit-Reset,
// RateLimit-Reset) counts when the matching remaining count is 0, and is
// a Unix time or, when small, seconds from now (the IETF draft's form).
func ParseRateLimit(code int, h http.Header, now time.Time) (until time.Time, ok bool) {
	switch code {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusForbidden:
	default:
		return time.Time{}, false
	}
	end, said := retryAfter(h.Get("Retry-After"), now)
	if !said {
		end, said = reset(h, now)
	}
	switch {
	case said:
	case code == http.StatusTooManyRequests:
		end = now.Add(DefaultRateLimitWait)
	default:
		return time.Time{}, false
	}
	return clampWait(end, now), true
}

// retryAfter reads a Retry-After value: seconds, or an HTTP date.
func retryAfter(v string, now time.Time) (time.Time, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return time.Time{}, false
	}
	if s, err := strconv.ParseUint(v, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		// Beyond the bound, or beyond a uint64: the bound (see clampWait).
		return now.Add(time.Duration(min(s, uint64(MaxRateLimitWait/time.Second)+1)) * time.Second), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return t, true
	}
	return time.Time{}, false
}

// unixTimeFloor tells a reset's Unix time from its seconds from now:
// 2001-09-09, before any answer this code will read.
const unixTimeFloor = 1_000_000_000

// reset reads GitHub's and GitLab's remaining count and reset, when no
// request remains.
func reset(h http.Header, now time.Time) (time.Time, bool) {
	for _, prefix := range []string{"X-RateLimit-", "RateLimit-"} {
		if strings.TrimSpace(h.Get(prefix+"Remaining")) != "0" {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(h.Get(prefix+"Reset")), 10, 64)
		switch {
		case err != nil || n < 0:
			continue
		case n >= unixTimeFloor:
			return time.Unix(n, 0), true
		default:
			return now.Add(time.Duration(min(n, int64(MaxRateLimitWait/time.Second))) * time.Second), true
		}
	}
	return time.Time{}, false
}

// clampWait keeps a rate limit's end within its bounds from now.
func clampWait(end, now time.Time) time.Time {
	if end.Before(now.Add(minRateLimitWait)) {
		return now.Add(minRateLimitWait)
	}
	if end.After(now.Add(MaxRateLimitWait)) {
		return now.Add(MaxRateLimitWait)
	}
	return end
}

// statusError is the error of an HTTP answer other than 200 OK to a
// request to host: a [RateLimitError] when it says so, else an
// httpStatusError.
func statusError(resp *http.Response, host, what string) error {
	if until, ok := ParseRateLimit(resp.StatusCode, resp.Header, time.Now()); ok {
		return &RateLimitError{Host: host, Code: resp.StatusCode, Until: until}
	}
	return &httpStatusError{resp.StatusCode, what + ": " + resp.Status}
}

// HTTPStatus returns the HTTP status a failed request to a remote over
// HTTP(S) was answered with, when err says it: a rate limit's, an answer a
// listing or fetch refused, or the 401, 403 and 404 a listing reports as
// go-git's transport errors. ok is false for any other failure (no
// answer, or a transport that is not HTTP).
func HTTPStatus(err error) (code int, ok bool) {
	var rl *RateLimitError
	var status *httpStatusError
	switch {
	case errors.As(err, &rl):
		return rl.Code, true
	case errors.As(err, &status):
		return status.code, true
	}
	var re *RemoteError
	if !errors.As(err, &re) || !isHTTP(re.URL) {
		return 0, false
	}
	switch {
	case errors.Is(err, transport.ErrAuthenticationRequired):
		return http.StatusUnauthorized, true
	case errors.Is(err, transport.ErrAuthorizationFailed):
		return http.StatusForbidden, true
	case errors.Is(err, transport.ErrRepositoryNotFound):
		return http.StatusNotFound, true
	}
	return 0, false
}

// isHTTP reports whether url is an HTTP(S) remote's.
func isHTTP(url string) bool {
	e, err := ParseURL(url)
	return err == nil && (e.Scheme == "http" || e.Scheme == "https")
}

// AsRateLimit returns the rate limit of host that err, from go-git's
// HTTP transport, carries in its answer; nil when it carries none. (go-git
// keeps the answer of a status it has no error of its own for, such as
// 429 and 503; a 403 it reports as an authorization failure, without.)
func AsRateLimit(err error, host string) error {
	// go-git's UnexpectedError does not unwrap: its Err is looked into.
	if unexpected := (*plumbing.UnexpectedError)(nil); errors.As(err, &unexpected) {
		err = unexpected.Err
	}
	var answer *githttp.Err
	if !errors.As(err, &answer) || answer.Response == nil {
		return nil
	}
	until, ok := ParseRateLimit(answer.Response.StatusCode, answer.Response.Header, time.Now())
	if !ok {
		return nil
	}
	return &RateLimitError{Host: host, Code: answer.Response.StatusCode, Until: until}
}
