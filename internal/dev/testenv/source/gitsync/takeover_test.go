package gitsync_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/source/gitsync"
)

// previousSelf is the field manager a program wrote the status under
// before it moved onto the library (a Numaplane controller, its binary's
// name, by updates).
const previousSelf = "manager"

// previousSelfWrote starts a harness whose GitSync "web" the source
// synced, stops it, and has the previous self write the status as it
// did before the move: its last sync, by an update.
func previousSelfWrote(t *testing.T) (*harness, *gittest.Repo) {
	t.Helper()
	h, repo, _ := syncedWeb(t)
	h.stop()
	updateStatusAs(h, previousSelf, "web", map[string]any{"phase": gitsync.PhasePending, "message": "synced by the previous self",
		"commitStatus": map[string]any{"hash": strings.Repeat("0", 40), "synced": true, "syncTime": "2026-01-01T00:00:00Z"}})
	return h, repo
}

// A program that moved onto the library names its previous self in
// Config.TakeOver: the status its previous self wrote (commitStatus,
// phase, message, by an update) is the source's from the next write on,
// taken by a forced apply; the reconciler's condition stays its own.
func TestThePreviousSelfsStatusIsTakenOver(t *testing.T) {
	h, repo := previousSelfWrote(t)
	updateStatusAs(h, otherManager, "web", map[string]any{"conditions": []any{successful()}})
	require.Contains(t, statusManagers(h, "web")[previousSelf], "f:commitStatus")

	h.srcCfg = append(h.srcCfg, func(c *gitsync.Config) { c.TakeOver = []string{previousSelf} })
	h.start()
	c2 := repo.Commit(t, "next", gittest.File("a.yaml", cm("a", "2")))
	h.pollOnce(repo.URL())
	st := h.waitStatus("web", "synced at the new commit", syncedAt(c2))
	assertSuccessful(t, st, "the reconciler's condition, after the take-over")
	owners := statusManagers(h, "web")
	assert.NotContains(t, owners[previousSelf], "f:commitStatus", "taken over: %v", owners)
	assert.NotContains(t, owners[previousSelf], "f:phase", "taken over: %v", owners)
	assert.Contains(t, owners[otherManager], "f:conditions", "never taken: %v", owners)
}

// A field another manager takes between the source's read of the GitSync
// and its forced write is not taken with the previous self's: the forced
// write is on the version read, refused, and written again without it.
func TestATakeOverTakesNothingWrittenSinceItsRead(t *testing.T) {
	h, repo := previousSelfWrote(t)

	// The first write that forces finds the message taken just before it.
	var once sync.Once
	writer := gitsync.ApplyStatus{Client: env.Dynamic, FieldManager: gitsync.DefaultFieldManager}
	intrude := gitsync.StatusWriterFunc(func(ctx context.Context, ns, name string, s gitsync.Status, foreign gitsync.ForeignFields) error {
		if _, force := foreign.TakeOver(s); force {
			once.Do(func() { updateStatusAs(h, "intruder", "web", map[string]any{"message": "the intruder's"}) })
		}
		return writer.WriteStatus(ctx, ns, name, s, foreign)
	})
	h.srcCfg = append(h.srcCfg, func(c *gitsync.Config) { c.TakeOver, c.StatusWriter = []string{previousSelf}, intrude })
	h.start()
	c2 := repo.Commit(t, "next", gittest.File("a.yaml", cm("a", "2")))
	h.pollOnce(repo.URL())
	st := h.waitStatus("web", "synced at the new commit", syncedAt(c2))
	assert.Equal(t, "the intruder's", st.Message, "left to the manager that took it")
	owners := statusManagers(h, "web")
	assert.Contains(t, owners["intruder"], "f:message", "%v", owners)
	assert.NotContains(t, owners[previousSelf], "f:commitStatus", "taken over: %v", owners)
}
