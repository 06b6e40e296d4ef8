package mountfs

import (
	"io/fs"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Mounted file systems read as one tree: testing/fstest checks every
// operation against every other, and nothing crosses a mount point.
func TestMount(t *testing.T) {
	base := fstest.MapFS{
		"app.yaml":      {Data: []byte("app")},
		"vendor/README": {Data: []byte("vendored")},
		"vendor/lib":    {Data: []byte("a gitlink left in: the mount wins"), Mode: 0o444},
	}
	lib := fstest.MapFS{
		"x.yaml":      {Data: []byte("x")},
		"deep/y.yaml": {Data: []byte("y")},
	}
	inner := fstest.MapFS{"z.yaml": {Data: []byte("z")}}
	m := Mount(base, map[string]fs.FS{"vendor/lib": lib, "vendor/lib/deep/inner": inner})
	require.NoError(t, fstest.TestFS(m, "app.yaml", "vendor/README", "vendor/lib/x.yaml", "vendor/lib/deep/y.yaml", "vendor/lib/deep/inner/z.yaml"))

	data, err := fs.ReadFile(m, "vendor/lib/deep/inner/z.yaml")
	require.NoError(t, err)
	assert.Equal(t, "z", string(data))
	info, err := fs.Stat(m, "vendor/lib")
	require.NoError(t, err)
	assert.True(t, info.IsDir())
	assert.Equal(t, "lib", info.Name())
	_, err = m.Open("../app.yaml")
	assert.ErrorIs(t, err, fs.ErrInvalid)

	// A link is followed in its own file system: a submodule's link cannot
	// reach the superproject, nor the superproject's into a submodule.
	base["escape"] = &fstest.MapFile{Data: []byte("vendor/lib/x.yaml"), Mode: fs.ModeSymlink}
	lib["up"] = &fstest.MapFile{Data: []byte("../app.yaml"), Mode: fs.ModeSymlink}
	target, err := fs.ReadLink(m, "vendor/lib/up")
	require.NoError(t, err)
	assert.Equal(t, "../app.yaml", target)
	_, err = fs.ReadFile(m, "vendor/lib/up")
	assert.Error(t, err, "a submodule's link does not leave it")
	_, err = fs.ReadFile(m, "escape")
	assert.ErrorIs(t, err, fs.ErrNotExist, "the superproject's link does not enter a submodule")
}
