package watcher_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// A submodule's host that answers 429 Retry-After is rate limited like a
// remote's: no request to it until the end it gave, the limit reported.
func TestASubmodulesHostRateLimitIsHonoured(t *testing.T) {
	t.Parallel()
	srv, other := gittest.NewServer(t), gittest.NewServer(t)
	lib := other.NewRepo(t, "g/lib")
	pin := lib.Commit(t, "lib", gittest.File("lib.yaml", "v1"))
	app := srv.NewRepo(t, "g/app")
	app.Commit(t, "app", gittest.File("app.yaml", "app"), gittest.Submodule("lib", lib.URL(), pin))
	other.Limit(gittest.Limit{Kind: gittest.TooManyRequests, Until: time.Now().Add(time.Minute)})

	obs := watchertest.NewObserver()
	sink := watchertest.NewSink("rec")
	w := newWatcher(t, obs)
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "t", URL: app.URL(), RecurseSubmodules: true}), sink))
	start(t, w)
	obs.WaitFor(t, "the delivery failing", watchertest.Is(watcher.EventDeliveryFailed, "t"))
	time.Sleep(3 * time.Second)
	var kinds []string
	for _, r := range other.Requests() {
		kinds = append(kinds, r.Kind+":"+string(rune('0'+r.Status/100)))
	}
	t.Logf("delivery failures: %d", obs.Count(watchertest.Is(watcher.EventDeliveryFailed, "t")))
	assert.Equal(t, 1, obs.Count(watchertest.Is(watcher.EventRateLimited, "")), "the submodule host's limit is reported")
	assert.Len(t, kinds, 1, "requests to the submodule's host in its limit (the first one refused): %v", kinds)
}
