package gitutil

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
)

func TestParseRateLimit(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	unix := func(d time.Duration) string { return fmt.Sprint(now.Add(d).Unix()) }
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		code   int
		header http.Header
		wait   time.Duration // 0: not a rate limit
	}{
		{"429 Retry-After seconds", 429, h("Retry-After", "20"), 20 * time.Second},
		{"429 Retry-After date", 429, h("Retry-After", now.Add(90*time.Second).Format(http.TimeFormat)), 90 * time.Second},
		{"503 Retry-After seconds", 503, h("Retry-After", "120"), 2 * time.Minute},
		{"503 without Retry-After is an outage", 503, h(), 0},
		{"bare 429 waits the default", 429, h(), DefaultRateLimitWait},
		{"GitHub primary limit", 403, h("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", unix(17*time.Minute), "X-RateLimit-Limit", "5000"), 17 * time.Minute},
		{"GitHub secondary limit", 403, h("Retry-After", "60"), time.Minute},
		{"GitHub 429 with reset", 429, h("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", unix(5*time.Minute)), 5 * time.Minute},
		{"GitLab", 429, h("RateLimit-Remaining", "0", "RateLimit-Reset", unix(30*time.Second), "Retry-After", "30"), 30 * time.Second},
		{"GitLab reset only", 429, h("RateLimit-Remaining", "0", "RateLimit-Reset", unix(45*time.Second)), 45 * time.Second},
		{"draft reset in seconds", 429, h("RateLimit-Remaining", "0", "RateLimit-Reset", "12"), 12 * time.Second},
		{"403 with requests left is a refusal", 403, h("X-RateLimit-Remaining", "12", "X-RateLimit-Reset", unix(time.Minute)), 0},
		{"plain 403 is a refusal", 403, h(), 0},
		{"404 is not a limit", 404, h("Retry-After", "10"), 0},
		{"200 is not a limit", 200, h("Retry-After", "10"), 0},
		{"500 is not a limit", 500, h("Retry-After", "10"), 0},
		{"a far end is cut to the bound", 429, h("Retry-After", "4000000000"), MaxRateLimitWait},
		{"an end past any number is cut to the bound", 503, h("Retry-After", "99999999999999999999999"), MaxRateLimitWait},
		{"a far reset is cut to the bound", 403, h("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", unix(1000*time.Hour)), MaxRateLimitWait},
		{"a date years away is cut to the bound", 503, h("Retry-After", now.AddDate(30, 0, 0).Format(http.TimeFormat)), MaxRateLimitWait},
		{"a past reset waits a second", 403, h("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", unix(-time.Hour)), time.Second},
		{"Retry-After 0 waits a second", 429, h("Retry-After", "0"), time.Second},
		{"a garbled Retry-After falls back to the reset", 429, h("Retry-After", "soon", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", unix(time.Minute)), time.Minute},
		{"a garbled 429 waits the default", 429, h("Retry-After", "-5", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "x"), DefaultRateLimitWait},
		{"a negative reset is not read", 403, h("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "-3"), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			until, ok := ParseRateLimit(tc.code, tc.header, now)
			if tc.wait == 0 {
				assert.False(t, ok, "until %v", until)
				return
			}
			if assert.True(t, ok) {
				assert.Equal(t, tc.wait, until.Sub(now))
			}
		})
	}
}

func TestRateLimitErrorSaysWhoAndUntil(t *testing.T) {
	until := time.Date(2026, 12, 5, 12, 17, 0, 0, time.UTC)
	err := fmt.Errorf("list refs: %w", &RateLimitError{Host: "github.com", Code: 403, Until: until})
	assert.True(t, errors.Is(err, ErrRateLimited))
	var rl *RateLimitError
	assert.True(t, errors.As(err, &rl))
	assert.Equal(t, "list refs: rate limited by github.com (HTTP 403) until 2026-12-05T12:17:00Z", err.Error())
}

// FuzzParseRateLimit: whatever a host answers, a rate limit ends within
// its bounds, and only a 403, 429 or 503 is one.
func FuzzParseRateLimit(f *testing.F) {
	f.Add(429, "20", "", "")
	f.Add(403, "", "0", "1799999999")
	f.Add(503, "Wed, 21 Oct 2015 07:28:00 GMT", "", "")
	f.Add(429, "", "0", "99999999999999999999")
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, code int, retry, remaining, reset string) {
		h := http.Header{}
		h.Set("Retry-After", retry)
		h.Set("X-RateLimit-Remaining", remaining)
		h.Set("X-RateLimit-Reset", reset)
		h.Set("RateLimit-Remaining", remaining)
		h.Set("RateLimit-Reset", reset)
		until, ok := ParseRateLimit(code, h, now)
		if !ok {
			return
		}
		if code != 403 && code != 429 && code != 503 {
			t.Fatalf("%d read as a rate limit", code)
		}
		if d := until.Sub(now); d < time.Second || d > MaxRateLimitWait {
			t.Fatalf("wait %v out of bounds", d)
		}
	})
}

// A listing a host refuses with a rate limit is one request, reported as
// the limit with its end: not an authorization failure, and not asked
// again in protocol version 0. While the limit holds, the Lister sends the
// host nothing: it answers with the limit. A listing of a repository the
// server does not have, once the server is known, is one request too.
func TestARefusedListingIsOneRequest(t *testing.T) {
	for _, kind := range []gittest.LimitKind{gittest.TooManyRequests, gittest.Unavailable, gittest.GitHubRateLimit, gittest.GitLabRateLimit, gittest.BareTooManyRequests} {
		srv := gittest.NewServer(t)
		repo := srv.NewRepo(t, "g/r")
		repo.Commit(t, "1", gittest.File("f", "1"))
		l := NewLister()
		_, err := l.ListRefs(t.Context(), repo.URL(), nil, []string{"HEAD"})
		require.NoError(t, err)
		end := time.Now().Add(30 * time.Second)
		srv.Limit(gittest.Limit{Kind: kind, Until: end})
		before := len(srv.Requests())
		_, err = l.ListRefs(t.Context(), repo.URL(), nil, []string{"HEAD"})
		var rl *RateLimitError
		require.ErrorAs(t, err, &rl, "%v", kind)
		assert.NotErrorIs(t, err, transport.ErrAuthorizationFailed)
		assert.False(t, rl.Until.Before(end.Truncate(time.Second)), "%v: %s", kind, rl.Until)
		assert.Len(t, srv.Requests(), before+1, "%v: one request", kind)
		code, ok := HTTPStatus(err)
		assert.True(t, ok)
		assert.Equal(t, rl.Code, code)

		_, err = l.ListRefs(t.Context(), repo.URL(), nil, []string{"HEAD"})
		require.ErrorIs(t, err, ErrRateLimited)
		_, err = l.UploadPack(t.Context(), repo.URL(), Transport{}, nil)
		require.ErrorIs(t, err, ErrRateLimited)
		assert.Len(t, srv.Requests(), before+1, "%v: none while the limit holds", kind)
		assert.Equal(t, rl, l.HostLimit(rl.Host))
	}
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	repo.Commit(t, "1", gittest.File("f", "1"))
	l := NewLister()
	_, err := l.ListRefs(t.Context(), repo.URL(), nil, []string{"HEAD"})
	require.NoError(t, err)
	before := len(srv.Requests())
	_, err = l.ListRefs(t.Context(), srv.URL()+"/g/none.git", nil, []string{"HEAD"})
	require.ErrorIs(t, err, transport.ErrRepositoryNotFound)
	assert.Len(t, srv.Requests(), before+1, "a missing repository: one request")
	code, ok := HTTPStatus(err)
	assert.True(t, ok)
	assert.Equal(t, 404, code)
	assert.NoError(t, l.HostLimit("elsewhere.example"))
}
