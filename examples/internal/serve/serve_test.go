package serve

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The server answers with the runnable's context (its logger) until the
// context ends, then Start returns nil.
func TestServerServesUntilItsContextEnds(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	logged := make(chan string, 1)
	log := funcr.New(func(_, args string) { logged <- args }, funcr.Options{})
	s := Server{Listener: l, Leader: true, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		logr.FromContextOrDiscard(r.Context()).Info("served")
		_, _ = io.WriteString(w, "ok")
	})}
	assert.True(t, s.NeedLeaderElection())
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), log))
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	resp, err := http.Get("http://" + l.Addr().String())
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, "ok", string(body))
	assert.Contains(t, <-logged, "served", "the runnable's logger")
	cancel()
	require.NoError(t, <-done)
	_, err = http.Get("http://" + l.Addr().String())
	assert.Error(t, err, "closed")
}
