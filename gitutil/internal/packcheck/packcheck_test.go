package packcheck

import (
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/go-git/go-git/v5/plumbing/format/idxfile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
)

// repoIndex makes a repository of n files, packed in one pack, and
// returns the path of its index.
func repoIndex(t *testing.T, n int) string {
	t.Helper()
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	files := gittest.Numbered(n, func(i int) string { return fmt.Sprintf("d/%03d", i) })
	repo.Commit(t, "one", files...)
	cmd := exec.Command("git", "repack", "-a", "-d", "-q")
	cmd.Env = append(os.Environ(), "GIT_DIR="+repo.BareDir())
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	idxs, err := filepath.Glob(filepath.Join(repo.BareDir(), "objects", "pack", "*.idx"))
	require.NoError(t, err)
	require.Len(t, idxs, 1)
	return idxs[0]
}

// The full check of an index reads it through in constant memory and
// finds what go-git's decoder finds, and a checksum that does not match.
func TestVerifyIndexFindsDamage(t *testing.T) {
	good, err := os.ReadFile(repoIndex(t, 40))
	require.NoError(t, err)
	count := int(binary.BigEndian.Uint32(good[8+255*4:]))
	require.Greater(t, count, 40)
	names, offsets := 8+1024, 8+1024+count*(20+4)
	resum := func(b []byte) []byte {
		s := sha1.Sum(b[:len(b)-20])
		copy(b[len(b)-20:], s[:])
		return b
	}
	edit := func(f func([]byte)) []byte {
		b := append([]byte(nil), good...)
		f(b)
		return b
	}
	for _, c := range []struct {
		name, err string
		data      []byte
	}{
		{"whole", "", good},
		{"a CRC flipped", "checksum mismatch", edit(func(b []byte) { b[names+count*20] ^= 1 })},
		{"a name repeated", "out of order", resum(edit(func(b []byte) { copy(b[names+20:names+40], b[names:names+20]) }))},
		{"a name moved out of its bucket", "", resum(edit(func(b []byte) { b[names] = 0xff }))},
		{"fanout decreasing", "fanout decreases", resum(edit(func(b []byte) { binary.BigEndian.PutUint32(b[8+100*4:], 0xffff) }))},
		{"a large offset past its table", "past the large offsets", resum(edit(func(b []byte) { binary.BigEndian.PutUint32(b[offsets:], 1<<31|3) }))},
		{"cut short", "cut short", good[:len(good)-10]},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "pack.idx")
			require.NoError(t, os.WriteFile(p, c.data, 0o644))
			f, err := os.Open(p)
			require.NoError(t, err)
			defer f.Close()
			n, _, err := VerifyIndex(f)
			if c.name == "whole" {
				require.NoError(t, err)
				assert.EqualValues(t, count, n)
			} else {
				require.Error(t, err)
				if c.err != "" {
					assert.ErrorContains(t, err, c.err)
				}
			}
			// go-git's decoder agrees on what is whole.
			_, _ = f.Seek(0, 0)
			gerr := idxfile.NewDecoder(f).Decode(idxfile.NewMemoryIndex())
			if c.name == "whole" {
				assert.NoError(t, gerr)
			}
		})
	}
}
