//go:build unix

package gitsync_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/safefile"
	"github.com/modwatch/modwatch/source/gitsync"
)

// mountSecret lays out dir as the kubelet mounts a Secret or a ConfigMap
// with the key name: name -> ..data/name, ..data -> a version directory.
// plant makes the key's file in that directory.
func mountSecret(t *testing.T, dir, name string, plant func(p string)) string {
	t.Helper()
	version := filepath.Join(dir, "..2026_01_01_00_00_00.1")
	require.NoError(t, os.MkdirAll(version, 0o755))
	plant(filepath.Join(version, name))
	if _, err := os.Lstat(filepath.Join(dir, "..data")); err != nil {
		require.NoError(t, os.Symlink(filepath.Base(version), filepath.Join(dir, "..data")))
	}
	p := filepath.Join(dir, name)
	require.NoError(t, os.Symlink(filepath.Join("..data", name), p))
	return p
}

// hostile is what a mount's key may be that is no file: a named pipe,
// whose open waited for a writer for ever, and a link to /dev/zero, read
// until the process ran out of memory.
func hostile(t *testing.T, dir string) map[string]string {
	t.Helper()
	var fifo string
	t.Cleanup(func() { // a reader blocked in the pipe's open is let go, once the test failed
		if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_ = w.Close()
		}
	})
	return map[string]string{
		"pipe": mountSecret(t, dir, "pipe", func(p string) { fifo = p; require.NoError(t, syscall.Mkfifo(p, 0o600)) }),
		"zero": mountSecret(t, dir, "zero", func(p string) { require.NoError(t, os.Symlink("/dev/zero", p)) }),
		"big": mountSecret(t, dir, "big", func(p string) {
			require.NoError(t, os.WriteFile(p, []byte(`{"token": "`+strings.Repeat("x", 4<<20)+`"}`), 0o600))
		}),
	}
}

// within fails the test unless f returns within a deadline far above what
// it takes: a read blocked for ever fails instead of hanging.
func within(t *testing.T, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("blocked: did not return within 10 s")
	}
}

// A credential file in a mounted Secret is read through ..data; one that
// is no file is refused at once, naming the file and not what it holds.
func TestCredentialFilesAreFollowedToAFileOnly(t *testing.T) {
	dir := t.TempDir()
	good := mountSecret(t, dir, "creds.json", func(p string) {
		require.NoError(t, os.WriteFile(p, []byte(`{"token": "s3cret"}`), 0o600))
	})
	files := hostile(t, dir)
	yaml := "repoCredentials:\n  - url: git.example.com/good\n    httpCredential: {username: u, password: {fromFile: {jsonFilePath: " + good + ", key: token}}}\n"
	for name, p := range files {
		yaml += "  - url: git.example.com/" + name + "\n    httpCredential: {username: u, password: {fromFile: {jsonFilePath: " + p + ", key: token}}}\n"
	}
	cfg, err := gitsync.ParseControllerConfig([]byte(yaml))
	require.NoError(t, err)
	creds, err := gitsync.NewCredentials(nil, cfg)
	require.NoError(t, err)

	a, err := creds.Resolve(t.Context(), "https://git.example.com/good/r.git")
	require.NoError(t, err)
	assert.Equal(t, "s3cret", a.Password, "a Secret's key mounted through ..data")
	for name, want := range map[string]error{"pipe": safefile.ErrNotRegular, "zero": safefile.ErrNotRegular, "big": safefile.ErrTooLarge} {
		t.Run(name, func(t *testing.T) {
			var err error
			within(t, func() { _, err = creds.Resolve(t.Context(), "https://git.example.com/"+name+"/r.git") })
			require.ErrorIs(t, err, want)
			assert.ErrorContains(t, err, files[name])
			assert.NotContains(t, err.Error(), "xxxx", "nothing the file holds")
		})
	}
}

// The controller configuration, a mounted ConfigMap, is read through
// ..data; one that is no file is refused at once.
func TestNewControllerFollowsToAFileOnly(t *testing.T) {
	dir := t.TempDir()
	good := mountSecret(t, dir, "config.yaml", func(p string) {
		require.NoError(t, os.WriteFile(p, []byte("clusterName: c1\n"), 0o644))
	})
	c, err := gitsync.NewController(nil, nil, gitsync.ControllerOptions{Path: good})
	require.NoError(t, err)
	assert.Equal(t, "c1", c.Config.ClusterName)
	files := hostile(t, dir)
	for name, want := range map[string]error{"pipe": safefile.ErrNotRegular, "zero": safefile.ErrNotRegular, "big": safefile.ErrTooLarge} {
		t.Run(name, func(t *testing.T) {
			var err error
			within(t, func() { _, err = gitsync.NewController(nil, nil, gitsync.ControllerOptions{Path: files[name]}) })
			require.ErrorIs(t, err, want)
			assert.ErrorContains(t, err, files[name])
		})
	}
}
