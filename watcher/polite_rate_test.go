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

// busiest returns the most requests srv received in any second, and
// every request it received, by kind.
func busiest(srv *gittest.Server) (int, map[string]int) {
	reqs := srv.Requests()
	kinds := map[string]int{}
	for _, r := range reqs {
		kinds[r.Kind]++
	}
	return gittest.MaxPerSecond(reqs, time.Second), kinds
}

// slack is what a host may see in a second past its rate and burst: a
// turn's requests are charged when it is handed out, and the last of a
// turn handed out just before a second can be sent in it (a listing's
// after its capabilities), as can a fetch's advertisement, charged
// after the fetch.
const slack = 2

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
	deliverAtBudget(t, srv, targets, watcher.HostBudget{PerSecond: 4, Burst: 2})
	most, kinds := busiest(srv)
	assert.LessOrEqual(t, most, 4+2+slack, "requests within one second to a host of PerSecond 4, Burst 2 (all requests: %v)", kinds)
}

// The first listings of a host's remotes, at start, each ask for the
// server's capabilities and then list: their turns cost two of the rate
// (one each would let eight of them send sixteen requests at once).
func TestFirstListingsKeepTheRate(t *testing.T) {
	t.Parallel()
	srv := gittest.NewServer(t)
	var targets []watcher.Target
	for i := range 8 {
		r := srv.NewRepo(t, fmt.Sprintf("g/r%d", i))
		r.Commit(t, "1", gittest.File("f", "1"))
		targets = append(targets, watcher.Target{ID: fmt.Sprintf("t%d", i), URL: r.URL(), Revision: "main"})
	}
	// A burst of eight: the first listings go together, before any has
	// made the server known.
	deliverAtBudget(t, srv, targets, watcher.HostBudget{PerSecond: 2, Burst: 8})
	most, kinds := busiest(srv)
	assert.LessOrEqual(t, most, 2+8+slack, "requests within one second to a host of PerSecond 2, Burst 8 (all requests: %v)", kinds)
}

// deliverAtBudget delivers targets, all on srv, by a watcher with b for
// srv's host.
func deliverAtBudget(t *testing.T, srv *gittest.Server, targets []watcher.Target, b watcher.HostBudget) {
	obs := watchertest.NewObserver()
	sink := watchertest.NewSink("rec")
	w := newWatcher(t, obs, watcher.WithHostBudget(strings.TrimPrefix(srv.URL(), "http://"), b))
	require.NoError(t, w.Route(watchertest.NewSource(targets...), sink))
	start(t, w)
	sink.WaitDelivered(t, len(targets))
}
