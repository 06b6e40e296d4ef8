//go:build unix

package mirror

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil/internal/packcheck"
	"github.com/modwatch/modwatch/internal/dev/gittest"
)

// soon fails the test unless f returns within a deadline far above what
// it takes: an open that waits on a named pipe fails instead of hanging.
// Every named pipe under dir is opened for writing then, so that a reader
// blocked in one returns.
func soon(t *testing.T, dir string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.Type()&os.ModeNamedPipe != 0 {
				if w, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					_ = w.Close()
				}
			}
			return nil
		})
		t.Fatal("blocked: did not return within 20 s")
	}
}

// fifo replaces the file or directory at p with a named pipe.
func fifo(t *testing.T, p string) {
	t.Helper()
	require.NoError(t, os.RemoveAll(p))
	require.NoError(t, syscall.Mkfifo(p, 0o644))
}

// What a mirror's pack directory never holds in the place of a pack, its
// index or the directory itself (a named pipe, whose open waited for a
// writer for ever and wedged the mirror's open; a link, to /dev/zero or to
// the real file moved elsewhere) is found at open without being waited
// on or followed: the store is damaged, and rebuilt at the next fetch.
func TestHostilePackFilesAreDamageFoundAtOpen(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c := repo.Commit(t, "1", gittest.File("f", "1"))
	for name, damage := range map[string]func(t *testing.T, idx string){
		"index a named pipe": func(t *testing.T, idx string) { fifo(t, idx) },
		"pack a named pipe":  func(t *testing.T, idx string) { fifo(t, strings.TrimSuffix(idx, ".idx")+".pack") },
		"pack directory a named pipe": func(t *testing.T, idx string) {
			fifo(t, filepath.Dir(idx))
		},
		"index a link to /dev/zero": func(t *testing.T, idx string) {
			require.NoError(t, os.Remove(idx))
			require.NoError(t, os.Symlink("/dev/zero", idx))
		},
		"pack a link to itself moved": func(t *testing.T, idx string) {
			pack := strings.TrimSuffix(idx, ".idx") + ".pack"
			moved := filepath.Join(t.TempDir(), "moved.pack")
			require.NoError(t, os.Rename(pack, moved))
			require.NoError(t, os.Symlink(moved, pack))
		},
		// The pack directory moved elsewhere, with a file of someone
		// else's: the clearing of what is not a pack there removed it.
		"pack directory a link elsewhere": func(t *testing.T, idx string) {
			packDir, moved := filepath.Dir(idx), filepath.Join(t.TempDir(), "pack")
			require.NoError(t, os.Rename(packDir, moved))
			require.NoError(t, os.Symlink(moved, packDir))
			theirs := filepath.Join(moved, "theirs")
			require.NoError(t, os.WriteFile(theirs, []byte("x"), 0o644))
			t.Cleanup(func() { assert.FileExists(t, theirs, "nothing is removed through a link") })
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			m, err := Open(dir, repo.URL(), Options{})
			require.NoError(t, err)
			_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
			require.NoError(t, err)
			idx, err := filepath.Glob(filepath.Join(dir, "objects", "pack", "*.idx"))
			require.NoError(t, err)
			require.Len(t, idx, 1)
			damage(t, idx[0])
			soon(t, dir, func() { err = packcheck.Packs(dir, true) })
			require.ErrorContains(t, err, "refused", "damage, said as such")

			soon(t, dir, func() {
				if m, err = Open(dir, repo.URL(), Options{}); err == nil {
					_ = m.Progress()
				}
			})
			require.NoError(t, err)
			res, err := m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
			require.NoError(t, err)
			require.ErrorContains(t, res.Rebuilt, "damaged object store")
			assert.Equal(t, c, res.Refs["refs/heads/main"].String())
			require.NoError(t, packcheck.Packs(dir, true))
		})
	}
}

// The record of the packs a repack replaced, and the mirror's
// configuration, are read without waiting on a named pipe in their place
// or reading a device a link names; a loose object that is either is
// damage found by the store's verification.
func TestHostileMirrorFilesDoNotBlock(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	repo.Commit(t, "1", gittest.File("f", "1"))
	dir := t.TempDir()
	m, err := Open(dir, repo.URL(), Options{})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)

	fifo(t, filepath.Join(dir, replacedFile))
	soon(t, dir, func() { dropLeftReplaced(dir) })
	require.NoError(t, os.Remove(filepath.Join(dir, replacedFile)))
	require.NoError(t, os.Symlink("/dev/zero", filepath.Join(dir, replacedFile)))
	soon(t, dir, func() { dropLeftReplaced(dir) })

	config := filepath.Join(dir, "config")
	saved, err := os.ReadFile(config)
	require.NoError(t, err)
	fifo(t, config)
	soon(t, dir, func() { err = m.markPartial() })
	require.ErrorContains(t, err, "refused")
	require.NoError(t, os.Remove(config))
	require.NoError(t, os.WriteFile(config, saved, 0o644))

	const loose = "0123456789abcdef0123456789abcdef01234567"
	p := filepath.Join(dir, "objects", loose[:2], loose[2:])
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	for _, plant := range []func(){
		func() { require.NoError(t, syscall.Mkfifo(p, 0o644)) },
		func() { require.NoError(t, os.Symlink("/dev/zero", p)) },
	} {
		plant()
		soon(t, dir, func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			err = m.verifyStore()
		})
		require.ErrorContains(t, err, "loose object "+loose)
		require.ErrorContains(t, err, "refused")
		require.NoError(t, os.Remove(p))
	}
}
