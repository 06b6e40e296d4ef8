package mirror

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil/internal/packview"
)

// Every mirror's store reads through one.
func TestMirrorStoreCacheIsIdleCache(t *testing.T) {
	m, err := Open(t.TempDir(), "https://example.invalid/r.git", Options{})
	require.NoError(t, err)
	st, ok := m.repo.Storer.(*mirrorStore)
	require.True(t, ok, "%T", m.repo.Storer)
	c, ok := st.objects.Cache().(*packview.IdleCache)
	require.True(t, ok, "%T", st.objects.Cache())
	assert.Equal(t, mirrorCacheIdle, c.Idle())
}
