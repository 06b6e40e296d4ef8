package safefile_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/safefile"
)

// Files of procfs are regular but say they are empty: what is read, not
// what the file says, holds the bound.
func TestReadFileDoesNotTrustTheStatedSize(t *testing.T) {
	const p = "/proc/self/maps"
	data, err := safefile.ReadFile(t.Context(), p, 1<<20, safefile.NoFollow)
	require.NoError(t, err)
	require.Greater(t, len(data), 100, "a file stated empty is read whole")
	_, err = safefile.ReadFile(t.Context(), p, 100, safefile.NoFollow)
	require.ErrorIs(t, err, safefile.ErrTooLarge)
	assert.Contains(t, err.Error(), p)
}
