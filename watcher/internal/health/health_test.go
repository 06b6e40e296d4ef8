package health

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// A failure is news when it starts or its reason changes; its end is news
// once; targets no longer watched are forgotten.
func TestFailureIsNewsOnce(t *testing.T) {
	var h Health
	assert.True(t, h.Fail("a", "TargetFailed: down"))
	assert.False(t, h.Fail("a", "TargetFailed: down"), "the same again")
	assert.True(t, h.Fail("a", "RefVanished: gone"), "another reason")
	assert.True(t, h.Fail("b", "TargetFailed: down"))
	assert.Equal(t, 2, h.Count())
	assert.True(t, h.OK("a"))
	assert.False(t, h.OK("a"), "recovered once")
	h.Keep(map[string]bool{"a": true})
	assert.Zero(t, h.Count(), "b is not watched any more")
}
