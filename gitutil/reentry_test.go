package gitutil

import (
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/gittest"
)

// reentryWait bounds what these tests wait for: a deadlock fails them
// then, leaving its goroutines behind, rather than hang the package.
const reentryWait = 10 * time.Second

// returnsWithin fails t when fn has not returned within reentryWait.
func returnsWithin(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(reentryWait):
		t.Fatalf("%s did not return within %s: deadlocked", what, reentryWait)
	}
}

// A pack whose index cannot be read, found when a file system is made,
// fails that FS; the mirror is not left locked.
func TestAPackWithoutIndexFoundByFSDoesNotLockTheMirror(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c := mustHash(repo.Commit(t, "1", gittest.File("f", "1")))
	dir := t.TempDir()
	m, err := OpenMirror(dir, repo.URL(), MirrorOptions{})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	_, err = m.FS(c, at(""))
	require.NoError(t, err)
	bogus := filepath.Join(dir, "objects", "pack", "pack-"+strings.Repeat("ab", 20)+".pack")
	require.NoError(t, os.WriteFile(bogus, []byte("PACK"), 0o644))

	returnsWithin(t, "FS", func() { _, err = m.FS(c, at("")) })
	require.Error(t, err)
	var has atomic.Bool
	returnsWithin(t, "HasCommit after it", func() { has.Store(m.HasCommit(c)) })
}
