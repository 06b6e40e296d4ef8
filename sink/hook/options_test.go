package hook_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/sink/hook"
	"github.com/modwatch/modwatch/watcher"
)

// WithDir runs the command there; the logger of the delivery's context
// gets its output.
func TestExecDirAndLogger(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	var logged []string
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		logged = append(logged, args)
	}, funcr.Options{Verbosity: 1})
	e := hook.Command("sh", []string{"-c", "pwd > out; echo ran in $(pwd)"}, hook.WithDir(dir))
	require.NoError(t, e.Deliver(logr.NewContext(context.Background(), log), change))
	got, err := os.ReadFile(filepath.Join(dir, "out"))
	require.NoError(t, err)
	real, err := filepath.EvalSymlinks(dir)
	require.NoError(t, err)
	assert.Equal(t, real, strings.TrimSpace(string(got)))
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, logged, 1)
	assert.Contains(t, logged[0], "ran in "+real)
}

// WithClient is how a hook reaches a server the default client does not
// trust.
func TestHTTPWithClient(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	assert.ErrorContains(t, hook.Post(srv.URL).Deliver(context.Background(), change), "certificate", "an unknown CA is refused")
	assert.NoError(t, hook.Post(srv.URL, hook.WithClient(srv.Client())).Deliver(context.Background(), change))
}

// git-sync's webhook: its method, no body for a GET, the commit in a
// header, one status that is success, or any answer (0).
func TestHTTPMethodStatusAndCommitHeader(t *testing.T) {
	type hit struct {
		method, hash string
		body         int
	}
	hits := make(chan hit, 10)
	status := http.StatusAccepted
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		hits <- hit{r.Method, r.Header.Get("Gitsync-Hash"), len(body)}
		w.WriteHeader(status)
	}))
	defer srv.Close()

	get := hook.Post(srv.URL, hook.WithMethod(http.MethodGet), hook.WithCommitHeader("Gitsync-Hash"), hook.WithSuccessStatus(http.StatusAccepted))
	require.NoError(t, get.Deliver(context.Background(), change))
	assert.Equal(t, hit{http.MethodGet, change.To.String(), 0}, <-hits)

	status = http.StatusOK // a 2xx, but not the one asked for
	err := get.Deliver(context.Background(), change)
	require.ErrorContains(t, err, "200")
	assert.False(t, watcher.IsPermanent(err))
	<-hits

	status = http.StatusNotFound
	anyAnswer := hook.Post(srv.URL, hook.WithSuccessStatus(0))
	require.NoError(t, anyAnswer.Deliver(context.Background(), change), "0: any answer is a success")
	h := <-hits
	assert.Equal(t, http.MethodPost, h.method)
	assert.Positive(t, h.body, "a POST carries the payload")
	assert.Empty(t, h.hash)
	require.ErrorContains(t, hook.Post(srv.URL).Deliver(context.Background(), change), "404", "by default any 2xx, and only those")
	<-hits
}
