package budget

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A decision over the share is held, once reported; made again after the
// delay, or confirmed, it goes ahead; a smaller one stays held with it.
func TestHoldsWhatIsOverTheShare(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := New(0.5, time.Minute)
	ok, why := b.Allow("route 0", []string{"a"}, 4, true, t0)
	assert.True(t, ok, "one of four is within the budget")
	assert.NoError(t, why)

	ok, why = b.Allow("route 0", []string{"b", "c"}, 4, true, t0)
	assert.False(t, ok, "two more, with the one just removed, are three of four")
	require.ErrorContains(t, why, "would remove 2 of 4 targets (b, c; 1 more removed in the last 1m0s)")
	assert.Equal(t, 2, b.Held())

	ok, why = b.Allow("route 0", []string{"b"}, 4, true, t0.Add(time.Second))
	assert.False(t, ok, "part of what is held is held with it")
	assert.NoError(t, why, "reported once")
	ok, _ = b.Allow("route 0", []string{"b"}, 4, false, t0.Add(time.Minute))
	assert.False(t, ok, "not while the source has no set")
	ok, _ = b.Allow("route 0", []string{"b"}, 4, true, t0.Add(time.Minute))
	assert.True(t, ok, "made again after the delay")
	assert.Zero(t, b.Held())

	_, why = b.Allow("route 1", []string{"x", "y", "z"}, 4, true, t0)
	require.Error(t, why)
	b.Confirm(t0.Add(time.Second))
	ok, _ = b.Allow("route 1", []string{"x", "y", "z"}, 4, true, t0.Add(2*time.Second))
	assert.True(t, ok, "confirmed")

	_, why = b.Allow("route 2", []string{"p", "q", "r"}, 4, true, t0)
	require.Error(t, why)
	b.Forget(map[string]bool{}, "route ")
	assert.Zero(t, b.Held(), "not made again in a pass: forgotten")
}

// A share of 1 or more holds nothing.
func TestShareOfOneHoldsNothing(t *testing.T) {
	b := New(1, time.Minute)
	ok, why := b.Allow("route 0", []string{"a", "b", "c"}, 3, true, time.Now())
	assert.True(t, ok)
	assert.NoError(t, why)
}
