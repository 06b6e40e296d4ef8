package release

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The release trees kept for the API check are the last used: the older
// go, and an extraction under way (a dot name) is left alone.
func TestPruneTreesKeepsTheLastUsed(t *testing.T) {
	base := t.TempDir()
	now := time.Now()
	for i, name := range []string{"a", "b", "c", "d", "e", ".extract-1"} {
		dir := filepath.Join(base, name)
		require.NoError(t, os.Mkdir(dir, 0o755))
		at := now.Add(-time.Duration(i) * time.Hour) // a the newest
		require.NoError(t, os.Chtimes(dir, at, at))
	}
	pruneTrees(base, 3)
	entries, err := os.ReadDir(base)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.ElementsMatch(t, []string{"a", "b", "c", ".extract-1"}, names)
}
