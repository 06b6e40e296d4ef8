package gitsync_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/sink/apply"
	"github.com/modwatch/modwatch/source/gitsync"
	"github.com/modwatch/modwatch/watcher"
)

// StatusCommit, as Numaplane's syncer: a reconciler took
// commitStatus.hash (and only it). The source then wrote synced, syncTime
// and error of its own commits under the reconciler's hash: the status
// said that hash was synced (or failed) when the source synced another
// commit. It must not write a commitStatus whose hash is not its own.
func TestAttackStatusCommitUnderAReconcilersHash(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "platform/apps")
	c1 := repo.Commit(t, "init", gittest.File("apps/web/a.yaml", cm("a", "1")))
	h := newHarness(t, "staging-1", apply.Config{}, nil, func(c *gitsync.Config) { c.StatusFields = gitsync.StatusCommit })
	h.create("web", spec(repo.URL(), "apps/web", h.ns))
	h.waitStatus("web", "synced at c1", func(s gitsync.Status) bool {
		return s.CommitStatus != nil && s.CommitStatus.Hash == c1 && s.CommitStatus.Synced
	})
	h.applyStatusAs(reconciler, "web", map[string]any{"commitStatus": map[string]any{"hash": "reconciler-hash"}})
	before := h.status("web").CommitStatus
	t.Logf("after the reconciler: %+v", before)

	c2 := repo.Commit(t, "bump", gittest.File("apps/web/a.yaml", cm("a", "2")))
	h.w.Trigger(repo.URL())
	h.settle("web", c2)
	c3 := repo.Commit(t, "break", gittest.File("apps/web/a.yaml", "kind: [\n"))
	h.w.Trigger(repo.URL())
	h.obs.WaitFor(t, "c3 failed", func(e watcher.Event) bool {
		return e.Type == watcher.EventDeliveryFailed && e.Commit.String() == c3
	})
	time.Sleep(time.Second)
	after := h.status("web").CommitStatus
	t.Logf("after c2 and c3: %+v", after)
	require.NotNil(t, after)
	assert.Equal(t, "reconciler-hash", after.Hash, "the reconciler's hash is its own")
	assert.Equal(t, before.Synced, after.Synced, "nothing is said of the reconciler's hash by the source's syncs")
	assert.Equal(t, before.Error, after.Error, "nor of an error of c3's")
	assert.True(t, before.SyncTime.Equal(&after.SyncTime), "nor its time")
}
