package leftovers

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func write(t *testing.T, p string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, nil, 0o644))
}

// A step's end removes the temporaries made since it began, and only
// those; a pack's own files stay.
func TestClearRemovesWhatAppearedSince(t *testing.T) {
	dir := t.TempDir()
	pack := filepath.Join(dir, "objects", "pack")
	write(t, filepath.Join(pack, "pack-1.pack"))
	write(t, filepath.Join(pack, "tmp_pack_old"))
	before := Note(dir)
	write(t, filepath.Join(pack, "tmp_pack_new"))
	write(t, filepath.Join(dir, "packed-refs.lock"))
	before.Clear(dir)
	assert.FileExists(t, filepath.Join(pack, "pack-1.pack"))
	assert.FileExists(t, filepath.Join(pack, "tmp_pack_old"))
	assert.NoFileExists(t, filepath.Join(pack, "tmp_pack_new"))
	assert.NoFileExists(t, filepath.Join(dir, "packed-refs.lock"))
	ClearAll(dir)
	assert.NoFileExists(t, filepath.Join(pack, "tmp_pack_old"))
	assert.FileExists(t, filepath.Join(pack, "pack-1.pack"))
}

// A lock file is stale outside the object store only.
func TestStaleLocks(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "refs", "heads", "main.lock"))
	write(t, filepath.Join(dir, "objects", "info", "x.lock"))
	assert.Equal(t, []string{filepath.Join("refs", "heads", "main.lock")}, StaleLocks(dir))
}
