package hook_test

import (
	"context"
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
