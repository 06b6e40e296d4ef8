package watcher_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// A host's rate (4 a second, a burst of 2) bounds the requests sent it:
// a remote with targets pinned to several commits takes a turn for the
// fetch of each.
func TestCommitPinnedTargetsKeepTheRate(t *testing.T) {
	t.Parallel()
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	var targets []watcher.Target
	for i := range 8 {
		c := repo.Commit(t, fmt.Sprint(i), gittest.File("f", fmt.Sprint(i)))
		targets = append(targets, watcher.Target{ID: fmt.Sprintf("pin%d", i), URL: repo.URL(), Revision: c})
	}
	host := strings.TrimPrefix(srv.URL(), "http://")
	obs := watchertest.NewObserver()
	sink := watchertest.NewSink("rec")
	w := newWatcher(t, obs, watcher.WithHostBudget(host, watcher.HostBudget{PerSecond: 4, Burst: 2}))
	require.NoError(t, w.Route(watchertest.NewSource(targets...), sink))
	start(t, w)
	sink.WaitDelivered(t, len(targets))
	reqs := srv.Requests()
	kinds := map[string]int{}
	for _, r := range reqs {
		kinds[r.Kind]++
	}
	most := gittest.MaxPerSecond(reqs, time.Second)
	assert.LessOrEqual(t, most, 4+2, "requests within one second to a host of PerSecond 4, Burst 2 (all requests: %v)", kinds)
}

// The first listings of a host's remotes, at start, each ask for the
// server's capabilities and then list: their turns cost two of the rate.
func TestFirstListingsKeepTheRate(t *testing.T) {
	t.Parallel()
	srv := gittest.NewServer(t)
	var targets []watcher.Target
	for i := range 6 {
		r := srv.NewRepo(t, fmt.Sprintf("g/r%d", i))
		r.Commit(t, "1", gittest.File("f", "1"))
		targets = append(targets, watcher.Target{ID: fmt.Sprintf("t%d", i), URL: r.URL(), Revision: "main"})
	}
	host := strings.TrimPrefix(srv.URL(), "http://")
	obs := watchertest.NewObserver()
	sink := watchertest.NewSink("rec")
	w := newWatcher(t, obs, watcher.WithHostBudget(host, watcher.HostBudget{PerSecond: 4, Burst: 4}))
	require.NoError(t, w.Route(watchertest.NewSource(targets...), sink))
	start(t, w)
	sink.WaitDelivered(t, len(targets))
	reqs := srv.Requests()
	kinds := map[string]int{}
	for _, r := range reqs {
		kinds[r.Kind]++
	}
	most := gittest.MaxPerSecond(reqs, time.Second)
	assert.LessOrEqual(t, most, 8, "requests within one second to a host of PerSecond 4, Burst 4 (all requests: %v)", kinds)
}
