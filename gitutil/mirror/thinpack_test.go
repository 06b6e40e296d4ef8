package mirror

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/internal/packcheck"
	"github.com/modwatch/modwatch/internal/dev/gittest"
)

// A line added to a large file and a file added to a large directory
// travel as deltas against what the mirror has (a thin pack: bytes, not
// the whole directory and file again), and the pack stored is complete:
// git's own fsck accepts the mirror, and the new commit reads.
func TestFetchListedTakesThinPacks(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	rng := rand.New(rand.NewPCG(3, 5))
	var big strings.Builder
	for range 40000 { // past storeLimit: this base is deflated, the tree's is stored
		fmt.Fprintf(&big, "%016x %016x\n", rng.Uint64(), rng.Uint64())
	}
	files := append(gittest.Numbered(2000, func(i int) string { return fmt.Sprintf("dir/%04d", i) }), gittest.File("big", big.String()))
	repo.Commit(t, "one", files...)
	m, err := Open(t.TempDir(), repo.URL(), Options{})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)

	grown := big.String() + "one more line\n"
	two := repo.Commit(t, "two", gittest.File("big", grown), gittest.File("dir/new", "new"))
	refs, err := gitutil.ListRefs(ctxT(t), repo.URL(), nil, nil)
	require.NoError(t, err)
	before, trees := repo.Counts().FetchBytes.Load(), m.TreesRead()
	res, err := m.FetchListed(ctxT(t), nil, map[string]gitutil.Hash{"refs/heads/main": refs.Refs["refs/heads/main"]})
	require.NoError(t, err)
	assert.Equal(t, trees, m.TreesRead(), "copying the bases into the pack reads no tree (TreesRead counts what checks cost)")
	assert.Equal(t, two, res.Refs["refs/heads/main"].String())
	sent := repo.Counts().FetchBytes.Load() - before
	assert.Less(t, sent, int64(2048), "deltas, not a 2,001-entry tree and a 1.3 MB file")
	t.Logf("one commit: %d bytes", sent)

	fsck := exec.Command("git", "fsck", "--strict", "--no-dangling")
	fsck.Dir = m.dir
	out, err := fsck.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.NoError(t, packcheck.Packs(m.dir, true))
	fsys, err := m.FS(mustHash(two), at(""))
	require.NoError(t, err)
	defer fsys.(io.Closer).Close()
	b, err := fs.ReadFile(fsys, "big")
	require.NoError(t, err)
	assert.Equal(t, grown, string(b))
	entries, err := fs.ReadDir(fsys, "dir")
	require.NoError(t, err)
	assert.Len(t, entries, 2001)
}

// thinPack builds a pack of one delta against base, which it does not
// hold.
func thinPack(base plumbing.Hash) []byte {
	delta := []byte{3, 5, 2, 'h', 'i'} // from 3 bytes to 5: wrong, and never applied
	var p bytes.Buffer
	p.WriteString("PACK")
	_ = binary.Write(&p, binary.BigEndian, uint32(2))
	_ = binary.Write(&p, binary.BigEndian, uint32(1))
	p.WriteByte(byte(plumbing.REFDeltaObject)<<4 | byte(len(delta)))
	p.Write(base[:])
	z := zlib.NewWriter(&p)
	_, _ = z.Write(delta)
	_ = z.Close()
	sum := sha1.Sum(p.Bytes())
	p.Write(sum[:])
	return p.Bytes()
}

// A pack whose delta names a base the mirror does not have, or that is cut
// short, is refused with why, and leaves nothing in the pack directory.
func TestThinPackWithoutItsBaseIsRefused(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	repo.Commit(t, "one", gittest.File("a", "1"))
	m, err := Open(t.TempDir(), repo.URL(), Options{})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	packDir := filepath.Join(m.dir, "objects", "pack")
	listing := func() []string {
		entries, err := os.ReadDir(packDir)
		require.NoError(t, err)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}
	was := listing()
	missing := mustHash(strings.Repeat("ab", 20))
	pack := thinPack(plumbing.Hash(missing))
	for name, data := range map[string][]byte{"missing base": pack, "cut short": pack[:len(pack)-10]} {
		m.mu.Lock()
		err := m.storeThinPack(bytes.NewReader(data))
		m.mu.Unlock()
		require.Error(t, err, name)
		if name == "missing base" {
			assert.ErrorContains(t, err, "delta base "+missing.String())
		}
		assert.Equal(t, was, listing(), name)
	}
}
