package packfmt_test

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"io"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil/internal/packfmt"
)

func blob(t *testing.T, content string) plumbing.EncodedObject {
	t.Helper()
	o := &plumbing.MemoryObject{}
	o.SetType(plumbing.BlobObject)
	_, err := o.Write([]byte(content))
	require.NoError(t, err)
	return o
}

// pack builds a pack of entries (already encoded), with header and
// trailer.
func pack(entries ...[]byte) []byte {
	var b bytes.Buffer
	b.WriteString("PACK")
	_ = binary.Write(&b, binary.BigEndian, uint32(2))
	_ = binary.Write(&b, binary.BigEndian, uint32(len(entries)))
	for _, e := range entries {
		b.Write(e)
	}
	sum := sha1.Sum(b.Bytes())
	b.Write(sum[:])
	return b.Bytes()
}

func entry(t *testing.T, o plumbing.EncodedObject) []byte {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, packfmt.WriteEntry(&b, o))
	return b.Bytes()
}

// refDelta is a delta entry on base (by hash) that inserts one byte.
func refDelta(t *testing.T, base plumbing.Hash, baseSize int) []byte {
	t.Helper()
	delta := []byte{byte(baseSize), 1, 1, 'x'} // source size, target size, insert "x"
	var b bytes.Buffer
	b.WriteByte(byte(plumbing.REFDeltaObject)<<4 | byte(len(delta)))
	b.Write(base[:])
	z := zlib.NewWriter(&b)
	_, err := z.Write(delta)
	require.NoError(t, err)
	require.NoError(t, z.Close())
	return b.Bytes()
}

// objects parses a pack into a memory store and returns its blobs' contents.
func objects(t *testing.T, data []byte) map[plumbing.Hash]string {
	t.Helper()
	st := memory.NewStorage()
	err := packfile.UpdateObjectStorage(st, bytes.NewReader(data))
	require.NoError(t, err)
	out := map[plumbing.Hash]string{}
	iter, err := st.IterEncodedObjects(plumbing.BlobObject)
	require.NoError(t, err)
	require.NoError(t, iter.ForEach(func(o plumbing.EncodedObject) error {
		b, err := object.GetBlob(st, o.Hash())
		require.NoError(t, err)
		r, err := b.Reader()
		require.NoError(t, err)
		data, err := io.ReadAll(r)
		require.NoError(t, err)
		out[o.Hash()] = string(data)
		return r.Close()
	}))
	return out
}

// An object written whole is what git's own reader reads back, small
// (stored) or past the store limit (deflated).
func TestWriteEntryReadsBack(t *testing.T) {
	small, large := blob(t, "hello\n"), blob(t, strings.Repeat("0123456789abcdef", 1<<17))
	got := objects(t, pack(entry(t, small), entry(t, large)))
	assert.Equal(t, map[plumbing.Hash]string{
		small.Hash(): "hello\n",
		large.Hash(): strings.Repeat("0123456789abcdef", 1<<17),
	}, got)
	assert.Less(t, len(entry(t, large)), 1<<20, "a large base is deflated")

	bad := &plumbing.MemoryObject{}
	bad.SetType(plumbing.OFSDeltaObject)
	assert.Error(t, packfmt.WriteEntry(io.Discard, bad), "only whole objects")
}

// The bases a pack's deltas name by hash, once each, within a limit; a
// pack cut short is an error.
func TestDeltaBases(t *testing.T) {
	a, b := blob(t, "a"), blob(t, "b")
	data := pack(refDelta(t, a.Hash(), 1), refDelta(t, b.Hash(), 1), refDelta(t, a.Hash(), 1))
	bases, err := packfmt.DeltaBases(bytes.NewReader(data), 2)
	require.NoError(t, err)
	assert.Equal(t, []plumbing.Hash{a.Hash(), b.Hash()}, bases)
	_, err = packfmt.DeltaBases(bytes.NewReader(data), 1)
	assert.ErrorContains(t, err, "more than 1 delta bases")
	_, err = packfmt.DeltaBases(bytes.NewReader(data[:len(data)-30]), 2)
	assert.Error(t, err)
	none, err := packfmt.DeltaBases(bytes.NewReader(pack(entry(t, a))), 2)
	require.NoError(t, err)
	assert.Empty(t, none)
}

// A thin pack with its bases appended is a whole pack: git's reader
// resolves its delta against the appended base, and its checksum holds.
func TestAppendBasesMakesAWholePack(t *testing.T) {
	base := blob(t, "a")
	thin := pack(refDelta(t, base.Hash(), 1))
	var fixed bytes.Buffer
	require.NoError(t, packfmt.AppendBases(&fixed, bytes.NewReader(thin), int64(len(thin)), []plumbing.EncodedObject{base}))
	got := objects(t, fixed.Bytes())
	assert.Equal(t, "a", got[base.Hash()])
	assert.Contains(t, got, plumbing.ComputeHash(plumbing.BlobObject, []byte("x")), "the delta resolved")
	assert.Equal(t, uint32(2), binary.BigEndian.Uint32(fixed.Bytes()[8:12]))
}
