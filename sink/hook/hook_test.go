package hook_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/dev/gittest"

	"github.com/modwatch/modwatch/sink/hook"
	"github.com/modwatch/modwatch/watcher"
)

func TestMain(m *testing.M) {
	if pgid := os.Getenv(joinGroupEnv); pgid != "" {
		joinGroup(pgid) // the test binary as a hook
		return
	}
	goleak.VerifyTestMain(m, gittest.LeakOptions...)
}

var change = watcher.Change{
	Target: watcher.Target{ID: "app", URL: "https://deploy:s3cret@git.example.com/g/r.git", Path: "deploy"},
	Ref:    "refs/heads/main", From: gitutil.Hash{0xaa, 0xaa}, To: gitutil.Hash{0xbb, 0xbb},
	Reason: watcher.ReasonNewCommit, Paths: []string{"x.yaml"},
}

func TestExecEnvironment(t *testing.T) {
	out := filepath.Join(t.TempDir(), "env")
	h := hook.Command("sh", []string{"-c", `env | grep ^MODWATCH_ | sort > "$OUT"`})
	t.Setenv("OUT", out)
	require.NoError(t, h.Deliver(context.Background(), change))
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	env := string(data)
	for _, want := range []string{
		"MODWATCH_TARGET=app", "MODWATCH_PATH=deploy", "MODWATCH_REF=refs/heads/main",
		"MODWATCH_COMMIT=" + change.To.String(), "MODWATCH_FROM=" + change.From.String(), "MODWATCH_REASON=NewCommit",
		"MODWATCH_URL=https://redacted@git.example.com/g/r.git",
	} {
		assert.Contains(t, env, want+"\n")
	}
	assert.NotContains(t, env, "s3cret")
}

// A program's own names for what a change says, as git-sync's
// GITSYNC_HASH, come after the MODWATCH_ ones.
func TestExecEnvOfTheProgram(t *testing.T) {
	out := filepath.Join(t.TempDir(), "env")
	h := hook.Command("sh", []string{"-c", `echo "$GITSYNC_HASH" > "$OUT"`},
		hook.WithExecEnv(func(c watcher.Change) []string { return []string{"GITSYNC_HASH=" + c.To.String()} }))
	t.Setenv("OUT", out)
	require.NoError(t, h.Deliver(context.Background(), change))
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Equal(t, change.To.String()+"\n", string(data))
}

func TestExecFailures(t *testing.T) {
	err := hook.Command("sh", []string{"-c", "echo broken >&2; exit 3"}).Deliver(context.Background(), change)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "exit status 3")
	assert.Contains(t, err.Error(), "broken")

	// The timeout kills the command: its process is gone when Deliver
	// returns.
	pidFile := filepath.Join(t.TempDir(), "pid")
	err = hook.Command("sh", []string{"-c", `echo $$ > "$1"; exec sleep 600`, "sh", pidFile},
		hook.WithExecTimeout(100*time.Millisecond)).Deliver(context.Background(), change)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "timed out")
	data, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	require.NoError(t, err)
	assert.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "the hook's process was killed and reaped")

	err = hook.Command("/no/such/binary", nil).Deliver(context.Background(), change)
	require.Error(t, err)
}

func TestHTTP(t *testing.T) {
	var got hook.Payload
	var auth string
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth = r.Header.Get("Authorization")
		assert.Equal(t, "application/json", r.Header.Get("Content-Type"))
		require.NoError(t, json.NewDecoder(r.Body).Decode(&got))
		w.WriteHeader(status)
		_, _ = w.Write([]byte("nope"))
	}))
	defer srv.Close()

	h := hook.Post(srv.URL+"/hook", hook.WithHeader("Authorization", "Bearer t"))
	require.NoError(t, h.Deliver(context.Background(), change))
	assert.Equal(t, "Bearer t", auth)
	assert.Equal(t, hook.Payload{
		Target: "app", URL: "https://redacted@git.example.com/g/r.git", Path: "deploy",
		Ref: "refs/heads/main", From: change.From.String(), To: change.To.String(), Reason: "NewCommit", Paths: []string{"x.yaml"},
	}, got)

	status = http.StatusBadGateway
	err := h.Deliver(context.Background(), change)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "502")
	assert.False(t, watcher.IsPermanent(err), "a failed post is retried")
}

func TestHTTPTimeoutAndSecrets(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(block)
	u := strings.Replace(srv.URL, "http://", "http://user:hooks3cret@", 1)
	err := hook.Post(u, hook.WithHTTPTimeout(100*time.Millisecond)).Deliver(context.Background(), change)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "hooks3cret")
}

// A first delivery has no From: its MODWATCH_FROM is empty, not a hash of
// zeros.
func TestExecEnvironmentOfAFirstDelivery(t *testing.T) {
	out := filepath.Join(t.TempDir(), "env")
	h := hook.Command("sh", []string{"-c", `env | grep ^MODWATCH_FROM= > "$OUT"`})
	t.Setenv("OUT", out)
	first := change
	first.From, first.Reason = gitutil.Hash{}, watcher.ReasonInitial
	require.NoError(t, h.Deliver(context.Background(), first))
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Equal(t, "MODWATCH_FROM=\n", string(data))
}
