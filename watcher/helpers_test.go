package watcher_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

func readFile(c watcher.Change, name string) (string, error) {
	b, err := fs.ReadFile(c.FS, name)
	return string(b), err
}

// mirrorDirs lists the mirrors in a cache directory (not its lock file or
// temporary directory).
func mirrorDirs(t *testing.T, cacheDir string) []string {
	t.Helper()
	entries, err := os.ReadDir(cacheDir)
	require.NoError(t, err)
	var dirs []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			dirs = append(dirs, filepath.Join(cacheDir, e.Name()))
		}
	}
	return dirs
}

// memoryRemote is a remote of an in-memory git, for the tests of what the
// scheduler does that need no git server.
func memoryRemote() (*watchertest.Git, *watchertest.Remote) {
	git := watchertest.NewGit()
	return git, git.Remote("https://git.example/g/r.git")
}

// hash is the commit a test repository named in hex.
func hash(commit string) gitutil.Hash {
	h, err := gitutil.ParseHash(commit)
	if err != nil {
		panic(err)
	}
	return h
}
