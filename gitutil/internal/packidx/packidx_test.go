package packidx

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/idxfile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
)

// entries reads every entry of an index through it.
func entries(t *testing.T, iter func() (idxfile.EntryIter, error)) []idxfile.Entry {
	t.Helper()
	it, err := iter()
	require.NoError(t, err)
	var out []idxfile.Entry
	for {
		e, err := it.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		out = append(out, *e)
	}
}

// sameIndex checks that the index read in place answers as go-git's
// decoded one does, for every object and for objects it does not hold.
func sameIndex(t *testing.T, data []byte) {
	t.Helper()
	idx, err := New(data)
	require.NoError(t, err)
	answersAs(t, idx, data)
}

// answersAs checks that idx answers as go-git's decoding of data.
func answersAs(t *testing.T, idx *Index, data []byte) {
	t.Helper()
	mem := idxfile.NewMemoryIndex()
	require.NoError(t, idxfile.NewDecoder(bytes.NewReader(data)).Decode(mem))
	n, _ := mem.Count()
	got, _ := idx.Count()
	require.Equal(t, n, got)
	all := entries(t, mem.Entries)
	assert.Equal(t, all, entries(t, idx.Entries))
	assert.Equal(t, entries(t, mem.EntriesByOffset), entries(t, idx.EntriesByOffset))
	for _, e := range all {
		off, err := idx.FindOffset(e.Hash)
		require.NoError(t, err)
		assert.Equal(t, int64(e.Offset), off)
		crc, err := idx.FindCRC32(e.Hash)
		require.NoError(t, err)
		assert.Equal(t, e.CRC32, crc)
		h, err := idx.FindHash(off)
		require.NoError(t, err)
		assert.Equal(t, e.Hash, h)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	for range 200 {
		var h plumbing.Hash
		for i := range h {
			h[i] = byte(rng.IntN(256))
		}
		want, _ := mem.Contains(h)
		has, err := idx.Contains(h)
		require.NoError(t, err)
		assert.Equal(t, want, has)
		_, err = idx.FindOffset(h)
		assert.Equal(t, want, err == nil)
	}
	_, err := idx.FindHash(1 << 40)
	assert.ErrorIs(t, err, plumbing.ErrObjectNotFound)
}

// packedIndex makes a repository of n files, packed in one pack by git,
// and returns the path of its index.
func packedIndex(t *testing.T, n int) string {
	t.Helper()
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	files := gittest.Numbered(n, func(i int) string { return fmt.Sprintf("d/%03d", i) })
	repo.Commit(t, "one", files...)
	cmd := exec.Command("git", "-C", repo.BareDir(), "repack", "-a", "-d", "-q")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	idxs, err := filepath.Glob(filepath.Join(repo.BareDir(), "objects", "pack", "*.idx"))
	require.NoError(t, err)
	require.Len(t, idxs, 1)
	return idxs[0]
}

// An index read in place answers as go-git's decoded index does: on a
// real pack's, and on one with offsets past 2 GiB (a table of 8-byte
// offsets).
func TestPackIndexAnswersAsGoGits(t *testing.T) {
	idx := packedIndex(t, 300)
	data, err := os.ReadFile(idx)
	require.NoError(t, err)
	t.Run("a pack's", func(t *testing.T) { sameIndex(t, data) })
	t.Run("another pack's", func(t *testing.T) {
		_, err := Open(idx, plumbing.NewHash(strings.Repeat("12", 20)))
		assert.ErrorIs(t, err, idxfile.ErrMalformedIdxFile)
	})

	t.Run("large offsets", func(t *testing.T) { sameIndex(t, syntheticIndex(t, 500, 3)) })
	t.Run("mapped", func(t *testing.T) {
		data := syntheticIndex(t, 40000, 7)
		require.Greater(t, len(data), MapThreshold)
		p := filepath.Join(t.TempDir(), "pack.idx")
		require.NoError(t, os.WriteFile(p, data, 0o444))
		idx, err := Open(p, plumbing.NewHash("0123456789012345678901234567890123456789"))
		require.NoError(t, err)
		answersAs(t, idx, data)
	})
}

// syntheticIndex encodes an index of n objects with random names, every
// large-th of them past 2 GiB in the pack.
func syntheticIndex(t testing.TB, n, large int) []byte {
	t.Helper()
	w := new(idxfile.Writer)
	rng := rand.New(rand.NewPCG(2, uint64(n)))
	w.OnHeader(uint32(n))
	for i := range n {
		var h plumbing.Hash
		for k := range h {
			h[k] = byte(rng.IntN(256))
		}
		off := int64(12 + i*100)
		if i%large == 0 {
			off += 3 << 30
		}
		require.NoError(t, w.OnInflatedObjectHeader(plumbing.BlobObject, 10, off))
		require.NoError(t, w.OnInflatedObjectContent(h, off, rng.Uint32(), nil))
	}
	require.NoError(t, w.OnFooter(plumbing.NewHash("0123456789012345678901234567890123456789")))
	mem, err := w.Index()
	require.NoError(t, err)
	require.NotEmpty(t, mem.Offset64)
	var buf bytes.Buffer
	_, err = idxfile.NewEncoder(&buf).Encode(mem)
	require.NoError(t, err)
	return buf.Bytes()
}

// Hostile or damaged indexes are refused with an error, never read past
// their end, and whatever is accepted answers lookups without a panic:
// random indexes of the right shape, and a real one mutated.
func TestPackIndexTakesHostileInput(t *testing.T) {
	whole := syntheticIndex(t, 40, 4)
	rng := rand.New(rand.NewPCG(4, 4))

	use := func(data []byte) {
		idx, err := New(data)
		if err != nil {
			return
		}
		for i := range min(idx.count, 50) {
			var h plumbing.Hash
			copy(h[:], idx.name(i))
			if off, err := idx.FindOffset(h); err == nil {
				_, _ = idx.FindHash(off)
			}
			_, _ = idx.FindCRC32(h)
		}
		_, _ = idx.FindOffset(plumbing.NewHash("ffffffffffffffffffffffffffffffffffffffff"))
		for _, iter := range []func() (idxfile.EntryIter, error){idx.Entries, idx.EntriesByOffset} {
			if it, err := iter(); err == nil {
				for range 50 {
					if _, err := it.Next(); err != nil {
						break
					}
				}
			}
		}
	}
	accepted := 0
	for range 20000 {
		data := bytes.Clone(whole)
		switch rng.IntN(3) {
		case 0: // bytes changed anywhere
			for range 1 + rng.IntN(8) {
				data[rng.IntN(len(data))] = byte(rng.IntN(256))
			}
		case 1: // cut or grown
			if n := rng.IntN(len(data)); rng.IntN(2) == 0 {
				data = data[:n]
			} else {
				data = append(data, make([]byte, n)...)
			}
		default: // a fanout claiming more or fewer objects
			binary.BigEndian.PutUint32(data[HeaderSize+4*(128+rng.IntN(128)):], uint32(rng.IntN(1<<20)))
		}
		if len(data) < HeaderSize+FanoutSize+TrailerSize {
			continue // Open refuses these before reading
		}
		if _, err := New(data); err == nil {
			accepted++
		}
		use(data)
	}
	assert.Positive(t, accepted, "some damage leaves a readable index")
	_, err := New(append(bytes.Clone(whole), 1, 2, 3))
	assert.ErrorIs(t, err, idxfile.ErrMalformedIdxFile)
}
