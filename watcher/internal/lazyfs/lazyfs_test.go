package lazyfs_test

import (
	"errors"
	"io/fs"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/watcher/internal/lazyfs"
)

// The file system is opened at its first read, once; a failed open is
// tried again at the next read.
func TestOpensAtFirstUse(t *testing.T) {
	opens, fail := 0, true
	l := lazyfs.New(func() (fs.FS, error) {
		opens++
		if fail {
			return nil, errors.New("down")
		}
		return fstest.MapFS{"f": {Data: []byte("x")}}, nil
	})
	assert.Zero(t, opens, "not opened before a read")
	_, err := l.ReadFile("f")
	var pe *fs.PathError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "f", pe.Path)
	fail = false
	data, err := l.ReadFile("f")
	require.NoError(t, err)
	assert.Equal(t, "x", string(data))
	_, err = fs.Stat(l, "f")
	require.NoError(t, err)
	assert.Equal(t, 2, opens, "opened again after a failure, then kept")
	require.NoError(t, l.Close())
}
