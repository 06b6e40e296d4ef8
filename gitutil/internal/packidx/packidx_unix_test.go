//go:build unix

package packidx

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An index of 1 MiB or more is mapped; its file cut short under the
// mapping (another process, a failing disk) makes a read of the pages
// past the new end fault. That is an error of the lookup, never a SIGBUS
// that ends the program (gitutil's TestMirrorHealsAMappedIndexDamagedUnderIt
// has the damage decision verify it and the mirror heal).
func TestMappedIndexCutShortIsAnError(t *testing.T) {
	data := syntheticIndex(t, 40_000, 1000)
	require.GreaterOrEqual(t, len(data), MapThreshold)
	p := filepath.Join(t.TempDir(), "pack.idx")
	require.NoError(t, os.WriteFile(p, data, 0o644))
	idx, err := Open(p, plumbing.NewHash("0123456789012345678901234567890123456789"))
	require.NoError(t, err)
	require.True(t, idx.mapped)
	var last plumbing.Hash
	copy(last[:], idx.name(idx.count-1))
	_, err = idx.FindOffset(last)
	require.NoError(t, err)

	require.NoError(t, os.Truncate(p, 4096))
	_, err = idx.FindOffset(last)
	require.ErrorIs(t, err, ErrFault)
	_, err = idx.Contains(last)
	require.ErrorIs(t, err, ErrFault)
	_, err = idx.FindCRC32(last)
	require.ErrorIs(t, err, ErrFault)
	_, err = idx.FindHash(12)
	require.ErrorIs(t, err, ErrFault)
	it, err := idx.Entries()
	require.NoError(t, err)
	for err == nil {
		_, err = it.Next()
	}
	require.ErrorIs(t, err, ErrFault)
	assert.False(t, debug.SetPanicOnFault(false), "the goroutine's setting is restored")
}
