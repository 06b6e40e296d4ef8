package mirror

import (
	"bytes"
	"compress/flate"
	"compress/zlib"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/idxfile"
	"github.com/go-git/go-git/v5/plumbing/format/objfile"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/internal/packcheck"
	"github.com/modwatch/modwatch/gitutil/internal/packidx"
	"github.com/modwatch/modwatch/internal/dev/gittest"
)

// The damage decision, for every class of error a store or a fetch gives:
// what is never damage is not verified; a missing object is damage
// without verification; everything else is damage exactly when the
// store's verification finds some.
func TestDamageDecision(t *testing.T) {
	type class int
	const (
		never    class = iota // not damage, nothing verified
		missing               // damage, nothing verified
		verified              // damage when the verification fails
	)
	for _, c := range []struct {
		name  string
		err   error
		class class
	}{
		{"nil", nil, never},
		{"ref names a tree", fmt.Errorf("ref refs/tags/v9: %w: refs/tags/v9 names a tree (abc)", ErrNotCommit), never},
		{"commit not in mirror", fmt.Errorf("%w: abc", ErrCommitNotFound), never},
		{"ctx cancelled", fmt.Errorf("fetch: %w", context.Canceled), never},
		{"ctx deadline", fmt.Errorf("fetch: %w", context.DeadlineExceeded), never},
		{"remote refused", fmt.Errorf("fetch: %w", transport.ErrAuthenticationRequired), never},
		{"network", &url.Error{Op: "Get", URL: "https://h/r", Err: &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}}, never},
		{"selection", fmt.Errorf("%w: budget", ErrInvalidSelection), never},
		{"rebuilt since", fmt.Errorf("%w: x", ErrRebuilt), never},
		{"object missing", fmt.Errorf("open tree x: %w", plumbing.ErrObjectNotFound), missing},
		{"decompression (flate)", fmt.Errorf("read: %w", flate.CorruptInputError(120)), verified},
		{"decompression (zlib header)", zlib.ErrHeader, verified},
		{"decompression (go-git)", packfile.ErrZLib, verified},
		{"checksum (zlib)", zlib.ErrChecksum, verified},
		{"checksum (index)", fmt.Errorf("%w: checksum", idxfile.ErrMalformedIdxFile), verified},
		{"short read", io.ErrUnexpectedEOF, verified},
		{"end of file", io.EOF, verified},
		{"I/O", &fs.PathError{Op: "read", Path: "objects/pack/p.pack", Err: syscall.EIO}, verified},
		{"index fault", fmt.Errorf("%w: fault reading a mapped index", idxfile.ErrMalformedIdxFile), verified},
		{"anything else", errors.New("bad object"), verified},
	} {
		for _, damaged := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/store damaged=%v", c.name, damaged), func(t *testing.T) {
				verifies := 0
				verify := func() error {
					verifies++
					if damaged {
						return errors.New("pack p: content does not match its checksum")
					}
					return nil
				}
				reason := judge(c.err, verify)
				switch c.class {
				case never:
					assert.NoError(t, reason)
					assert.Zero(t, verifies, "nothing to verify")
				case missing:
					assert.Error(t, reason)
					assert.Zero(t, verifies)
				case verified:
					assert.Equal(t, 1, verifies)
					if damaged {
						assert.ErrorContains(t, reason, "does not match its checksum")
					} else {
						assert.NoError(t, reason, "a store that verifies is not rebuilt")
					}
				}
			})
		}
	}
}

// A lightweight tag on a tree (and an annotated one) is the error of the
// ref, not of the fetch, and never makes the mirror rebuild itself: the
// mirror the other refs live in is kept, poll after poll.
func TestTagOnATreeIsTheRefsError(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c := repo.Commit(t, "1", gittest.File("f", "1"))
	tree := repo.Git(t, "rev-parse", "HEAD^{tree}")
	repo.Git(t, "tag", "v9", tree)
	repo.Git(t, "tag", "-a", "-m", "on a tree", "v10", tree)
	repo.Git(t, "push", "-q", "origin", "refs/tags/v9", "refs/tags/v10")
	refs := []string{"refs/heads/main", "refs/tags/v9", "refs/tags/v10"}

	var damaged atomic.Int32
	m, err := Open(t.TempDir(), repo.URL(), Options{OnDamage: func(error) { damaged.Add(1) }})
	require.NoError(t, err)
	for poll := range 3 {
		var res FetchResult
		if poll == 0 {
			res, err = m.Fetch(ctxT(t), nil, refs)
		} else {
			listed, lerr := gitutil.ListRefs(ctxT(t), repo.URL(), nil, nil)
			require.NoError(t, lerr)
			want := map[string]gitutil.Hash{}
			for _, r := range refs {
				want[r] = listed.Refs[r]
			}
			res, err = m.FetchListed(ctxT(t), nil, want)
		}
		require.NoError(t, err, "poll %d", poll)
		assert.NoError(t, res.Rebuilt, "poll %d: the mirror is not damaged", poll)
		assert.Equal(t, c, res.Refs["refs/heads/main"].String())
		for _, tag := range []string{"refs/tags/v9", "refs/tags/v10"} {
			require.ErrorIs(t, res.RefErrors[tag], ErrNotCommit, tag)
			assert.ErrorContains(t, res.RefErrors[tag], "names a tree ("+tree+")")
			assert.NotContains(t, res.Refs, tag)
		}
	}
	_, err = m.FetchCommit(ctxT(t), nil, mustHash(tree))
	require.ErrorIs(t, err, ErrNotCommit, "a revision that is the SHA of a tree")
	assert.ErrorContains(t, err, tree+" is a tree")
	assert.Zero(t, damaged.Load())
	assert.True(t, m.HasCommit(mustHash(c)))
}

// flipBlob flips 16 bytes of the packed data of the blob content in a
// mirror's pack, from byte at of its entry; size, trailer and index stay
// as they were.
func flipBlob(t *testing.T, dir, content string, at int64) {
	t.Helper()
	idxs, err := filepath.Glob(filepath.Join(dir, "objects", "pack", "*.idx"))
	require.NoError(t, err)
	h := plumbing.ComputeHash(plumbing.BlobObject, []byte(content))
	for _, p := range idxs {
		pack := mustHash(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(p), "pack-"), ".idx"))
		idx, err := packidx.Open(p, plumbing.Hash(pack))
		require.NoError(t, err)
		off, err := idx.FindOffset(h)
		if errors.Is(err, plumbing.ErrObjectNotFound) {
			continue
		}
		require.NoError(t, err)
		f, err := os.OpenFile(strings.TrimSuffix(p, ".idx")+".pack", os.O_RDWR, 0)
		require.NoError(t, err)
		defer f.Close()
		at := off + at
		buf := make([]byte, 16)
		_, err = f.ReadAt(buf, at)
		require.NoError(t, err)
		for i := range buf {
			buf[i] ^= 0x5a
		}
		_, err = f.WriteAt(buf, at)
		require.NoError(t, err)
		return
	}
	t.Fatalf("blob %s is in no pack", h)
}

// Sixteen bytes flipped inside a blob's packed data (the pack's size, its
// trailer and its index intact) fail the read, whether the inflater finds
// them (corrupt input) or only zlib's checksum does; the pack's own
// checksum confirms the damage, and the next fetch rebuilds the mirror:
// the file reads again.
func TestFlippedBytesInAPackHeal(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	rnd := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	for range 8000 {
		fmt.Fprintf(&b, "%x\n", rnd.Uint64())
	}
	content := b.String() // 136 KB, about 70 KB packed
	c := mustHash(repo.Commit(t, "1", gittest.File("big.txt", content), gittest.File("small.txt", "s")))
	for _, tc := range []struct {
		name string
		at   int64
		read string
	}{
		{"inflate fails", 100, "flate: corrupt input"},
		// The content inflated past its size, or its checksum: the
		// mirror inflates no further than the size, and which it sees
		// first depends on the bit.
		{"checksum fails", 20000, "big.txt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var damaged atomic.Int32
			dir := t.TempDir()
			m, err := Open(dir, repo.URL(), Options{OnDamage: func(error) { damaged.Add(1) }})
			require.NoError(t, err)
			_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
			require.NoError(t, err)

			flipBlob(t, dir, content, tc.at)
			require.NoError(t, packcheck.Packs(dir, true), "the index check alone does not see it")
			fsys, err := m.FS(c, at(""))
			require.NoError(t, err)
			_, err = fs.ReadFile(fsys, "big.txt")
			require.ErrorIs(t, err, ErrCorrupt)
			require.ErrorContains(t, err, tc.read)
			assert.Equal(t, int32(1), damaged.Load())

			res, err := m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
			require.NoError(t, err)
			require.ErrorContains(t, res.Rebuilt, "does not match its checksum")
			fsys, err = m.FS(c, at(""))
			require.NoError(t, err)
			data, err := fs.ReadFile(fsys, "big.txt")
			require.NoError(t, err)
			assert.Equal(t, content, string(data))
		})
	}
}

// The store's verification reads loose objects too (git's fetches of a
// few objects leave them): one that inflates to its name is sound, one
// with flipped bytes is damage that names it, and a file verified once is
// not read again while it is unchanged.
func TestVerifyStoreReadsLooseObjects(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	repo.Commit(t, "1", gittest.File("f", "1"))
	dir := t.TempDir()
	m, err := Open(dir, repo.URL(), Options{})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)

	writeLoose := func(content string, flip bool) string {
		obj := &plumbing.MemoryObject{}
		obj.SetType(plumbing.BlobObject)
		_, err := obj.Write([]byte(content))
		require.NoError(t, err)
		var buf bytes.Buffer
		w := objfile.NewWriter(&buf)
		require.NoError(t, w.WriteHeader(plumbing.BlobObject, int64(len(content))))
		_, err = w.Write([]byte(content))
		require.NoError(t, err)
		require.NoError(t, w.Close())
		data := buf.Bytes()
		if flip {
			for i := len(data) / 2; i < len(data)/2+4; i++ {
				data[i] ^= 0x5a
			}
		}
		h := obj.Hash().String()
		p := filepath.Join(dir, "objects", h[:2], h[2:])
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, data, 0o644))
		return h
	}
	writeLoose(strings.Repeat("sound\n", 100), false)
	m.mu.Lock()
	err = m.verifyStore()
	m.mu.Unlock()
	require.NoError(t, err)
	verified := len(m.verified)
	assert.Positive(t, verified)

	bad := writeLoose(strings.Repeat("damaged\n", 100), true)
	m.mu.Lock()
	err = m.verifyStore()
	m.mu.Unlock()
	require.Error(t, err)
	assert.ErrorContains(t, err, "loose object "+bad)
	assert.Equal(t, verified, len(m.verified), "what was sound is not read again; the damaged is not recorded")
}
