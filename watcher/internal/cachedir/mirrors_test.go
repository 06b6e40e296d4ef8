package cachedir

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Unused renames, for removal, the mirrors past their grace that no one
// uses, and nothing else: not a mirror used or touched within the grace,
// not a file or a directory of another name; Open clears what a killed
// process was removing.
func TestUnusedTakesOnlyIdleMirrors(t *testing.T) {
	dir := t.TempDir()
	c, err := Open(dir)
	require.NoError(t, err)
	old := time.Now().Add(-2 * time.Hour)
	mk := func(name string, isDir bool) string {
		p := filepath.Join(dir, name)
		if isDir {
			require.NoError(t, os.Mkdir(p, 0o700))
		} else {
			require.NoError(t, os.WriteFile(p, nil, 0o600))
		}
		require.NoError(t, os.Chtimes(p, old, old))
		return p
	}
	idle := mk(MirrorName("idle"), true)
	used := mk(MirrorName("used"), true)
	touched := mk(MirrorName("touched"), true)
	Touch(touched)
	mk(MirrorName("file"), false)
	mk("not-a-mirror", true)
	mk(MirrorName("young")+".clone", true)

	doomed, err := c.Unused(map[string]bool{MirrorName("used"): true}, time.Hour)
	require.NoError(t, err)
	assert.Equal(t, []string{idle + gcSuffix}, doomed)
	assert.NoDirExists(t, idle, "renamed, so that no one opens it")
	for _, p := range []string{used, touched, filepath.Join(dir, "not-a-mirror")} {
		assert.DirExists(t, p)
	}
	assert.FileExists(t, filepath.Join(dir, MirrorName("file")))

	c.Close()
	c, err = Open(dir, ".clone")
	require.NoError(t, err)
	defer c.Close()
	assert.NoDirExists(t, idle+gcSuffix, "a killed process's removal is finished at start")
	assert.NoDirExists(t, filepath.Join(dir, MirrorName("young")+".clone"))
	assert.DirExists(t, used)
}
