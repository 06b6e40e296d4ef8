//go:build unix

package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/safefile"
)

// promptly fails the test unless f returns within a deadline far above
// what it takes: a read blocked on a named pipe fails instead of hanging.
// fifo is opened for writing then, so that the reader returns.
func promptly(t *testing.T, fifo string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_ = w.Close()
		}
		t.Fatal("blocked: did not return within 10 s")
	}
}

// The files the flags name (a password, an SSH key, known hosts, a
// webhook's secret) are mounted Secrets' keys: read through ..data; a
// named pipe there, whose open waited for a writer for ever, or a link to
// /dev/zero, read until the process ran out of memory, is refused at once.
func TestMountedFilesAreFollowedToAFileOnly(t *testing.T) {
	dir := t.TempDir()
	version := filepath.Join(dir, "..2026_01_01_00_00_00.1")
	require.NoError(t, os.Mkdir(version, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(version, "password"), []byte("s3cret\n"), 0o600))
	require.NoError(t, os.Symlink(filepath.Base(version), filepath.Join(dir, "..data")))
	password := filepath.Join(dir, "password")
	require.NoError(t, os.Symlink("..data/password", password))
	fifo, zero := filepath.Join(dir, "fifo"), filepath.Join(dir, "zero")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	require.NoError(t, os.Symlink("/dev/zero", zero))

	c, err := credential{URL: "https://h", Username: "u", PasswordFile: password}.resolved()
	require.NoError(t, err)
	assert.Equal(t, "s3cret", c.Password)
	a, err := config{passwordFile: password}.auth()
	require.NoError(t, err)
	assert.Equal(t, "s3cret", a.Password)

	for _, bad := range []string{fifo, zero} {
		for name, read := range map[string]func() error{
			"--credential password-file": func() error {
				_, err := credential{URL: "https://h", Username: "u", PasswordFile: bad}.resolved()
				return err
			},
			"--password-file": func() error { _, err := config{passwordFile: bad}.auth(); return err },
			"--ssh-key-file": func() error {
				_, err := config{repo: "git@h:r", sshKeyFiles: []string{bad}, knownHosts: password, sshKnownHosts: true}.auth()
				return err
			},
			"--ssh-known-hosts-file": func() error {
				_, err := config{repo: "git@h:r", sshKeyFiles: []string{password}, knownHosts: bad, sshKnownHosts: true}.auth()
				return err
			},
			"--hook-secret-file": func() error { _, err := config{hookSecretFile: bad}.hookConfig(); return err },
		} {
			t.Run(name+" "+filepath.Base(bad), func(t *testing.T) {
				var err error
				promptly(t, fifo, func() { err = read() })
				require.ErrorIs(t, err, safefile.ErrNotRegular)
				assert.ErrorContains(t, err, bad)
			})
		}
	}
}

// A worktree's .git is git's own file: a named pipe or a link in its
// place is no sound worktree, found at once.
func TestAWorktreesGitFileIsNeverFollowedOrWaitedOn(t *testing.T) {
	root := t.TempDir()
	w := &worktrees{root: root}
	const hash = "0123456789abcdef0123456789abcdef01234567"
	wt := w.worktreeFor(hash)
	require.NoError(t, os.MkdirAll(wt, 0o755))
	gitdir := filepath.Join(root, ".git", "worktrees", hash)
	require.NoError(t, os.MkdirAll(gitdir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(gitdir, "HEAD"), []byte(hash+"\n"), 0o644))
	elsewhere := filepath.Join(t.TempDir(), "git")
	require.NoError(t, os.WriteFile(elsewhere, []byte("gitdir: "+gitdir+"\n"), 0o644))
	dotgit := filepath.Join(wt, ".git")

	require.NoError(t, os.Symlink(elsewhere, dotgit))
	var sound bool
	promptly(t, dotgit, func() { sound = w.sound(hash) })
	assert.False(t, sound, "a link in the place of .git")
	require.NoError(t, os.Remove(dotgit))
	require.NoError(t, syscall.Mkfifo(dotgit, 0o644))
	promptly(t, dotgit, func() { sound = w.sound(hash) })
	assert.False(t, sound, "a named pipe in the place of .git")
	require.NoError(t, os.Remove(dotgit))
	require.NoError(t, os.WriteFile(dotgit, []byte("gitdir: "+gitdir+"\n"), 0o644))
	assert.True(t, w.sound(hash), "the file itself")
}
