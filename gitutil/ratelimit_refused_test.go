package gitutil

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
)

// A server remembered as speaking version 0 only is listed by go-git: its
// 429 and 503 are read as rate limits all the same. (go-git keeps no
// header of a 403: such a server's 403 rate limit is an authorization
// failure; see docs/operations.md.)
func TestAVersion0ServersRateLimitIsOne(t *testing.T) {
	for _, kind := range []gittest.LimitKind{gittest.TooManyRequests, gittest.Unavailable} {
		l := NewLister()
		srv := gittest.NewServer(t)
		srv.SetV0Only(true)
		repo := srv.NewRepo(t, "g/r")
		repo.Commit(t, "1", gittest.File("f", "1"))
		_, err := l.ListRefs(ctxT(t), repo.URL(), nil, []string{"HEAD"})
		require.NoError(t, err) // the server is known as version 0 from now on

		srv.Limit(gittest.Limit{Kind: kind, Until: time.Now().Add(time.Minute)})
		_, err = l.ListRefs(ctxT(t), repo.URL(), nil, []string{"HEAD"})
		require.Error(t, err)
		var rl *RateLimitError
		assert.True(t, errors.As(err, &rl), "kind %d: a rate limit, got %v", kind, err)
		assert.False(t, errors.Is(err, transport.ErrAuthorizationFailed), "kind %d: a rate limit reported as an authorization failure: %v", kind, err)
		code, ok := HTTPStatus(err)
		t.Logf("kind %d: err=%v HTTPStatus=%d,%v", kind, err, code, ok)
		_ = http.StatusOK
	}
}

// A refused listing is one request, whatever the refusal: no 4xx is
// asked again in version 0.
func TestAnyRefusedListingIsOneRequest(t *testing.T) {
	for _, code := range []int{http.StatusBadRequest, http.StatusMethodNotAllowed, http.StatusGone, http.StatusUnavailableForLegalReasons, http.StatusRequestTimeout} {
		var n atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n.Add(1)
			http.Error(w, "refused", code)
		}))
		_, err := NewLister().ListRefs(ctxT(t), srv.URL+"/g/r.git", nil, []string{"HEAD"})
		srv.Close()
		require.Error(t, err)
		assert.EqualValues(t, 1, n.Load(), "HTTP %d: requests for one refused listing (err %v)", code, err)
	}
}
