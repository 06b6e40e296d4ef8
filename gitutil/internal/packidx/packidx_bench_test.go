package packidx

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/stretchr/testify/require"
)

// FindOffset is on the path of every object read (packView.find asks each
// pack's index in turn): a lookup of an object the index holds, and of one
// it does not, on a mapped index of 40,000 objects.
func BenchmarkFindOffset(b *testing.B) {
	data := syntheticIndex(b, 40_000, 1000)
	p := filepath.Join(b.TempDir(), "pack.idx")
	require.NoError(b, os.WriteFile(p, data, 0o444))
	idx, err := Open(p, plumbing.NewHash("0123456789012345678901234567890123456789"))
	require.NoError(b, err)
	require.True(b, idx.mapped)
	rng := rand.New(rand.NewPCG(5, 5))
	hits := make([]plumbing.Hash, 4096)
	misses := make([]plumbing.Hash, len(hits))
	for i := range hits {
		copy(hits[i][:], idx.name(rng.IntN(idx.count)))
		for k := range misses[i] {
			misses[i][k] = byte(rng.IntN(256))
		}
	}
	b.Run("hit", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, err := idx.FindOffset(hits[i%len(hits)]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("miss", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, err := idx.FindOffset(misses[i%len(misses)]); err == nil {
				b.Fatal("found")
			}
		}
	})
}
