//go:build unix

package packidx

import (
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/idxfile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// inPlace is the file of an index beside a pack (sparse, of the size its
// offsets need), opened and mapped; the tests rewrite the file in place,
// at its size, under the mapping, as another process would.
type inPlace struct {
	path     string
	pack     plumbing.Hash
	orig     []byte // the file as it was opened
	count    int
	packSize int64
	idx      *Index
}

// openInPlace writes orig (a syntheticIndex) and its pack, and opens it,
// mapped when it is mapFrom bytes or more.
func openInPlace(t testing.TB, orig []byte, mapFrom int64) *inPlace {
	t.Helper()
	dir := t.TempDir()
	ip := &inPlace{path: filepath.Join(dir, "pack-1.idx"), pack: plumbing.NewHash("0123456789012345678901234567890123456789"), orig: orig}
	ip.count = int(binary.BigEndian.Uint32(orig[HeaderSize+FanoutSize-4:]))
	ip.packSize = 3<<30 + 100*int64(ip.count) + 1024 // syntheticIndex's offsets, and the trailer
	require.NoError(t, os.WriteFile(ip.path, orig, 0o644))
	pack, err := os.Create(filepath.Join(dir, "pack-1.pack"))
	require.NoError(t, err)
	require.NoError(t, pack.Truncate(ip.packSize))
	require.NoError(t, pack.Close())
	ip.idx, err = openIndex(ip.path, ip.pack, mapFrom)
	require.NoError(t, err)
	require.True(t, ip.idx.mapped)
	require.Equal(t, uint64(ip.packSize-packTrailer), ip.idx.end)
	return ip
}

// Where the parts of the index are in its file.
func fanoutAt(b int) int64               { return HeaderSize + 4*int64(b) }
func (ip *inPlace) nameAt(pos int) int64 { return HeaderSize + FanoutSize + 20*int64(pos) }
func (ip *inPlace) offsetAt(pos int) int64 {
	return HeaderSize + FanoutSize + 24*int64(ip.count) + 4*int64(pos)
}
func (ip *inPlace) largeAt(k int) int64 {
	return HeaderSize + FanoutSize + 28*int64(ip.count) + 8*int64(k)
}

// What the index said when it was opened.
func (ip *inPlace) u32(at int64) uint32 { return binary.BigEndian.Uint32(ip.orig[at:]) }
func (ip *inPlace) hash(pos int) (h plumbing.Hash) {
	copy(h[:], ip.orig[ip.nameAt(pos):])
	return h
}
func (ip *inPlace) offset(pos int) int64 {
	o := ip.u32(ip.offsetAt(pos))
	if o&(1<<31) == 0 {
		return int64(o)
	}
	return int64(binary.BigEndian.Uint64(ip.orig[ip.largeAt(int(o&^(1<<31))):]))
}

// write writes b at at, in place.
func (ip *inPlace) write(t testing.TB, at int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(ip.path, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(b, at)
	require.NoError(t, errors.Join(err, f.Close()))
	st, err := os.Stat(ip.path)
	require.NoError(t, err)
	require.Equal(t, int64(len(ip.orig)), st.Size(), "rewritten at its size")
}

func (ip *inPlace) put32(t testing.TB, at int64, v uint32) {
	ip.write(t, at, binary.BigEndian.AppendUint32(nil, v))
}

func (ip *inPlace) put64(t testing.TB, at int64, v uint64) {
	ip.write(t, at, binary.BigEndian.AppendUint64(nil, v))
}

// isCorrupt checks that err says the index is corrupt: an error the
// damage decision verifies, not a miss.
func isCorrupt(t testing.TB, err error, msgAndArgs ...any) {
	t.Helper()
	require.ErrorIs(t, err, ErrCorrupt, msgAndArgs...)
	require.ErrorIs(t, err, idxfile.ErrMalformedIdxFile, msgAndArgs...)
	require.NotErrorIs(t, err, plumbing.ErrObjectNotFound, msgAndArgs...)
}

// lookupError checks that err is one a lookup may give: none, a miss, or
// the index corrupt.
func lookupError(t testing.TB, err error, what string) {
	t.Helper()
	if err != nil && !errors.Is(err, plumbing.ErrObjectNotFound) && !errors.Is(err, ErrCorrupt) {
		t.Fatalf("%s: %v", what, err)
	}
}

// exercise calls every method of ip.idx, with the names and offsets of
// sample positions and others, and checks that each answers with nothing
// but what a lookup may give: an offset in the pack, a miss, the index
// corrupt (and, iterating, the end).
func exercise(t testing.TB, ip *inPlace, sample []int) {
	t.Helper()
	idx := ip.idx
	hashes := []plumbing.Hash{plumbing.ZeroHash, plumbing.NewHash("ffffffffffffffffffffffffffffffffffffffff")}
	offsets := []int64{0, 12, 1 << 40, -1}
	for _, pos := range sample {
		hashes, offsets = append(hashes, ip.hash(pos)), append(offsets, ip.offset(pos))
	}
	for _, h := range hashes {
		_, err := idx.Contains(h)
		lookupError(t, err, "Contains")
		off, err := idx.FindOffset(h)
		lookupError(t, err, "FindOffset")
		if err == nil {
			require.True(t, off >= packHeader && off < ip.packSize-packTrailer, "offset %d in the pack", off)
		}
		_, err = idx.FindCRC32(h)
		lookupError(t, err, "FindCRC32")
	}
	for _, o := range offsets {
		_, err := idx.FindHash(o)
		lookupError(t, err, "FindHash")
	}
	n, err := idx.Count()
	lookupError(t, err, "Count")
	if err == nil {
		require.Equal(t, int64(ip.count), n)
	}
	for _, iter := range []func() (idxfile.EntryIter, error){idx.Entries, idx.EntriesByOffset} {
		it, err := iter()
		lookupError(t, err, "Entries")
		for i := 0; err == nil; i++ {
			require.LessOrEqual(t, i, ip.count, "the iteration ends")
			var e *idxfile.Entry
			if e, err = it.Next(); err == nil {
				require.True(t, e.Offset >= packHeader && e.Offset < uint64(ip.packSize-packTrailer), "offset %d in the pack", e.Offset)
			}
		}
		if !errors.Is(err, io.EOF) {
			lookupError(t, err, "Next")
		}
	}
}

// A mapped index rewritten in place after Open (at its size, so no fault:
// the mapping reads the new bytes) is read as the untrusted input it is:
// every fanout entry, position and offset is checked when it is read, and
// one that does not fit the index is ErrCorrupt (which gitutil's damage
// decision verifies), never a panic, never an offset outside the pack.
func TestMappedIndexRewrittenInPlaceIsAnError(t *testing.T) {
	orig := syntheticIndex(t, 40_000, 1000)
	open := func(t *testing.T) *inPlace { return openInPlace(t, orig, MapThreshold) }
	// The object at pos, and the positions (the first object, the last,
	// pos and its neighbours) exercise looks up after each rewrite.
	const pos = 20_011
	sample := []int{0, pos - 1, pos, pos + 1, 39_999}

	t.Run("fanout counting past the index", func(t *testing.T) {
		ip := open(t)
		h := ip.hash(pos)
		// Still ascending, from h's bucket on, and far past the count:
		// a search there read past the index (the reported panic).
		for b := int(h[0]); b < 256; b++ {
			ip.put32(t, fanoutAt(b), 1<<30+uint32(b))
		}
		_, err := ip.idx.FindOffset(h)
		isCorrupt(t, err)
		_, err = ip.idx.Contains(h)
		isCorrupt(t, err)
		_, err = ip.idx.FindCRC32(h)
		isCorrupt(t, err)
		_, err = ip.idx.FindHash(ip.offset(pos))
		isCorrupt(t, err)
		_, err = ip.idx.Count()
		isCorrupt(t, err)
		_, err = ip.idx.Entries()
		isCorrupt(t, err)
		_, err = ip.idx.EntriesByOffset()
		isCorrupt(t, err)
		_, err = ip.idx.FindOffset(ip.hash(0))
		isCorrupt(t, err, "a bucket before the rewrite: the fanout no longer ends at the count")
		exercise(t, ip, sample)
	})

	t.Run("fanout decreasing", func(t *testing.T) {
		ip := open(t)
		h := ip.hash(pos)
		require.Positive(t, ip.u32(fanoutAt(int(h[0])-1)))
		ip.put32(t, fanoutAt(int(h[0])), 0) // below the bucket before it: lo > hi
		_, err := ip.idx.FindOffset(h)
		isCorrupt(t, err)
		_, err = ip.idx.FindCRC32(h)
		isCorrupt(t, err)
		_, err = ip.idx.FindHash(ip.offset(pos))
		isCorrupt(t, err, "the name at that offset is not in its bucket")
		exercise(t, ip, sample)

		ip = open(t)
		ip.put32(t, fanoutAt(int(h[0])-1), ip.u32(fanoutAt(int(h[0])))+1) // the bucket before it past it
		_, err = ip.idx.FindOffset(h)
		isCorrupt(t, err)
		exercise(t, ip, sample)
	})

	t.Run("fanout[255] huge", func(t *testing.T) {
		ip := open(t)
		h := ip.hash(pos)
		require.Less(t, int(h[0]), 254)
		ip.put32(t, fanoutAt(255), 0xffff_ffff)
		_, err := ip.idx.FindOffset(h)
		isCorrupt(t, err, "the fanout does not end at the count")
		_, err = ip.idx.Count()
		isCorrupt(t, err)
		it, err := ip.idx.Entries()
		if err == nil {
			_, err = it.Next()
		}
		isCorrupt(t, err)
		exercise(t, ip, sample)
	})

	t.Run("fanout shifted within the count", func(t *testing.T) {
		ip := open(t)
		h := ip.hash(pos)
		// h's bucket moved 500 objects on: still ascending, within the
		// count, but the names read there begin otherwise.
		ip.put32(t, fanoutAt(int(h[0])-1), ip.u32(fanoutAt(int(h[0])-1))+500)
		ip.put32(t, fanoutAt(int(h[0])), ip.u32(fanoutAt(int(h[0])))+500)
		_, err := ip.idx.FindOffset(h)
		isCorrupt(t, err)
		exercise(t, ip, sample)
	})

	t.Run("4-byte offset past the 8-byte offsets", func(t *testing.T) {
		ip := open(t)
		h := ip.hash(pos)
		ip.put32(t, ip.offsetAt(pos), 1<<31|uint32(ip.idx.large+3))
		_, err := ip.idx.FindOffset(h)
		isCorrupt(t, err)
		_, err = ip.idx.EntriesByOffset()
		isCorrupt(t, err, "the offset order reads every offset")
		exercise(t, ip, sample)

		ip = open(t)
		ip.put32(t, ip.offsetAt(pos), 0xffff_ffff)
		_, err = ip.idx.FindOffset(h)
		isCorrupt(t, err)
		exercise(t, ip, sample)
	})

	t.Run("offset outside the pack", func(t *testing.T) {
		ip := open(t)
		large := -1 // a position whose offset is an 8-byte one
		for p := pos; large < 0; p++ {
			if ip.u32(ip.offsetAt(p))&(1<<31) != 0 {
				large = p
			}
		}
		k := int(ip.u32(ip.offsetAt(large)) &^ (1 << 31))
		for _, bad := range []uint64{uint64(ip.packSize), uint64(ip.packSize - packTrailer), 1 << 62, 1<<63 + 5} {
			ip.put64(t, ip.largeAt(k), bad)
			_, err := ip.idx.FindOffset(ip.hash(large))
			isCorrupt(t, err, "offset %d, past the pack's objects", bad)
		}
		ip.put64(t, ip.largeAt(k), uint64(ip.packSize-packTrailer-1)) // the last byte of the objects
		off, err := ip.idx.FindOffset(ip.hash(large))
		require.NoError(t, err)
		assert.Equal(t, ip.packSize-packTrailer-1, off)

		for _, bad := range []uint32{0, 4, packHeader - 1} {
			ip.put32(t, ip.offsetAt(pos), bad)
			_, err := ip.idx.FindOffset(ip.hash(pos))
			isCorrupt(t, err, "offset %d, in the pack's header", bad)
		}
		exercise(t, ip, sample)
	})

	t.Run("two objects at one offset", func(t *testing.T) {
		ip := open(t)
		require.Zero(t, ip.u32(ip.offsetAt(pos+1))&(1<<31))
		ip.write(t, ip.offsetAt(pos), ip.orig[ip.offsetAt(pos+1):ip.offsetAt(pos+2)])
		_, err := ip.idx.FindHash(ip.offset(pos + 1))
		isCorrupt(t, err)
		_, err = ip.idx.EntriesByOffset()
		isCorrupt(t, err)
		exercise(t, ip, sample)
	})

	t.Run("names garbage", func(t *testing.T) {
		ip := open(t)
		garbage := make([]byte, 20*ip.count)
		rng := rand.New(rand.NewPCG(6, 6))
		for i := range garbage {
			garbage[i] = byte(rng.IntN(256))
		}
		ip.write(t, ip.nameAt(0), garbage)
		for p := 0; p < ip.count; p += 97 {
			_, err := ip.idx.FindOffset(ip.hash(p))
			isCorrupt(t, err, "object %d", p)
		}
		_, err := ip.idx.FindHash(ip.offset(pos))
		isCorrupt(t, err)
		it, err := ip.idx.Entries()
		require.NoError(t, err)
		_, err = it.Next()
		isCorrupt(t, err)
		exercise(t, ip, sample)
	})

	t.Run("names out of order", func(t *testing.T) {
		ip := open(t)
		h, next := ip.hash(pos), ip.hash(pos+1)
		require.Equal(t, h[0], next[0], "in one bucket")
		ip.write(t, ip.nameAt(pos), next[:])
		ip.write(t, ip.nameAt(pos+1), h[:])
		it, err := ip.idx.Entries()
		require.NoError(t, err)
		for err == nil {
			_, err = it.Next()
		}
		isCorrupt(t, err, "the iteration in name order")
		exercise(t, ip, sample)
	})
}
