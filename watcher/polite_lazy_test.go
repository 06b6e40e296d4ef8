package watcher_test

import (
	"context"
	"io/fs"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// No request goes to a rate limited host, partial-mirror file fetches
// included: a sink's read outside its target's path (Change.Root) on a
// partial mirror is refused with the limit, not sent.
func TestALazyReadHonoursTheRateLimit(t *testing.T) {
	gitBin, err := exec.LookPath("git")
	require.NoError(t, err)
	srv := gittest.NewServer(t)
	mono := srv.NewRepo(t, "g/mono")
	mono.Commit(t, "init", gittest.File("apps/a/cm.yaml", "a1"), gittest.File("base/shared.yaml", "shared"))
	other := srv.NewRepo(t, "g/other")
	other.Commit(t, "1", gittest.File("f", "1"))

	proceed, entered := make(chan struct{}), make(chan struct{}, 1)
	readErr := make(chan error, 1)
	sink := watcher.Named("read", watcher.SinkFunc(func(ctx context.Context, c watcher.Change) error {
		if c.Target.ID != "a" {
			return nil
		}
		select {
		case entered <- struct{}{}:
		default:
		}
		select {
		case <-proceed:
		case <-ctx.Done():
			return ctx.Err()
		}
		_, err := fs.ReadFile(c.Root, "base/shared.yaml")
		select {
		case readErr <- err:
		default:
		}
		return err
	}))
	obs := watchertest.NewObserver()
	w := newWatcher(t, obs, watcher.WithGit(watcher.GoGit{GitCLI: gitBin, Partial: true}))
	require.NoError(t, w.Route(watchertest.NewSource(
		watcher.Target{ID: "a", URL: mono.URL(), Path: "apps/a"},
		watcher.Target{ID: "o", URL: other.URL(), Revision: "main"}), sink))
	start(t, w)
	obs.WaitFor(t, "o delivered", watchertest.Is(watcher.EventDelivered, "o"))
	select { // a's delivery is under way, its files of the path fetched
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("a is not delivered")
	}

	// The host limits the watcher, and the watcher knows it.
	srv.Limit(gittest.Limit{Kind: gittest.TooManyRequests, Until: time.Now().Add(time.Minute)})
	require.True(t, w.Trigger(other.URL()))
	obs.WaitFor(t, "the rate limit", watchertest.Is(watcher.EventRateLimited, ""))
	before := len(srv.Requests())

	close(proceed) // a's sink reads outside its path
	select {
	case err := <-readErr:
		t.Logf("the read: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no read")
	}
	after := srv.Requests()[before:]
	var kinds []string
	for _, r := range after {
		kinds = append(kinds, r.Repo+" "+r.Kind)
	}
	assert.Empty(t, kinds, "requests sent to the host during its rate limit")
}
