//go:build unix

package packidx

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// reopened writes the file back as it was opened and reads it again
// through the same mapping: a fresh Index, checked as Open checks it.
func (ip *inPlace) reopened(t testing.TB) *inPlace {
	t.Helper()
	ip.write(t, 0, ip.orig)
	idx, err := checkedIndex(ip.idx.data, ip.pack, true)
	require.NoError(t, err)
	idx.end = ip.idx.end
	fresh := *ip
	fresh.idx = idx
	return &fresh
}

// FuzzIndex writes arbitrary bytes over a valid mapped index after it
// was opened (in place, at its size) and calls every method: each answers
// with an offset in the pack, a miss or ErrCorrupt; none panics.
func FuzzIndex(f *testing.F) {
	ip := openInPlace(f, syntheticIndex(f, 600, 7), 0)
	const pos = 300
	f.Add(uint32(fanoutAt(int(ip.hash(pos)[0]))), []byte{0x7f, 0xff, 0xff, 0xff}, uint16(pos))
	f.Add(uint32(fanoutAt(255)), []byte{0, 0, 0, 1}, uint16(0))
	f.Add(uint32(fanoutAt(17)), bytes.Repeat([]byte{0, 0, 0xff, 0xff}, 20), uint16(pos))
	f.Add(uint32(ip.nameAt(pos)), bytes.Repeat([]byte{0xaa}, 40), uint16(pos))
	f.Add(uint32(ip.offsetAt(pos)), []byte{0x80, 0, 0, 0x7f}, uint16(pos))
	f.Add(uint32(ip.offsetAt(pos)), []byte{0, 0, 0, 3}, uint16(pos))
	f.Add(uint32(ip.largeAt(0)), []byte{0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, uint16(0))
	f.Fuzz(func(t *testing.T, at uint32, patch []byte, pick uint16) {
		ip := ip.reopened(t)
		off := int64(at) % int64(len(ip.orig))
		ip.write(t, off, patch[:min(int64(len(patch)), int64(len(ip.orig))-off)])
		p := int(pick) % ip.count
		exercise(t, ip, []int{0, p, (p + 1) % ip.count, ip.count - 1})
	})
}
