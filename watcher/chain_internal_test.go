package watcher

import (
	"context"
	"errors"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil"
)

// A chain whose step failed remembers how far the change went, for its
// retry, but not the change's trees: kept until the target's next change
// succeeds, which may be long, a tree would keep its packs on disk.
func TestChainKeepsNoTreeOfAFailedChange(t *testing.T) {
	firsts := 0
	first := SinkFunc(func(context.Context, Change) error { firsts++; return nil })
	failing := SinkFunc(func(context.Context, Change) error { return errors.New("down") })
	c := Chain("c", first, failing)
	ch := Change{Target: Target{ID: "t"}, To: gitutil.Hash{0xb}, From: gitutil.Hash{0xa}, Reason: ReasonNewCommit, FS: fstest.MapFS{}, Root: fstest.MapFS{}}
	_, err := c.DeliverReport(context.Background(), ch)
	require.Error(t, err)

	p, ok := c.done["t"]
	require.True(t, ok, "how far it went is remembered")
	assert.Nil(t, p.change.FS, "not its tree")
	assert.Nil(t, p.change.Root)
	_, err = c.DeliverReport(context.Background(), ch)
	require.Error(t, err)
	assert.Equal(t, 1, firsts, "the retry of the same change does not run the step that passed again")
}
