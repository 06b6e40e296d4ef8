//go:build unix

package watcher_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// A checkpoint file replaced between runs by what the store never writes
// (a named pipe, whose open waited for a writer for ever, so that the
// watcher did not stop when told to; a link to /dev/zero, read until the
// process ran out of memory) does not wedge or crash the watcher: it is
// reported, treated as absent, the target delivered again as Initial and
// the record rewritten; and the watcher stops when its context ends
// (watchertest.Run's stop fails the test otherwise).
func TestHostileCheckpointIsDeliveredAgain(t *testing.T) {
	for name, plant := range map[string]func(t *testing.T, p string){
		"named pipe":        func(t *testing.T, p string) { require.NoError(t, syscall.Mkfifo(p, 0o644)) },
		"link to /dev/zero": func(t *testing.T, p string) { require.NoError(t, os.Symlink("/dev/zero", p)) },
	} {
		t.Run(name, func(t *testing.T) {
			srv := gittest.NewServer(t)
			repo := srv.NewRepo(t, "g/r")
			c1 := repo.Commit(t, "1", gittest.File("f", "1"))
			storeDir, cacheDir := t.TempDir(), t.TempDir()
			target := watcher.Target{ID: "t", URL: repo.URL()}
			run := func(t *testing.T, sink *watchertest.Sink, log *logLines) (stop func()) {
				store, err := watcher.NewFileStore(storeDir)
				require.NoError(t, err)
				w := watcher.New(watcher.WithCacheDir(cacheDir), watcher.WithStore(store), watcher.WithInterval(time.Hour))
				require.NoError(t, w.Route(watchertest.NewSource(target), sink))
				return startLogging(t, w, log.logger())
			}
			sink1 := watchertest.NewSink("rec")
			stop := run(t, sink1, &logLines{})
			sink1.WaitCommit(t, "t", hash(c1))
			stop()

			files, err := filepath.Glob(filepath.Join(storeDir, "*.json"))
			require.NoError(t, err)
			require.Len(t, files, 1)
			require.NoError(t, os.Remove(files[0]))
			plant(t, files[0])

			sink2, log := watchertest.NewSink("rec"), &logLines{}
			stop = run(t, sink2, log)
			// Registered after Run's stop, so run before it: a reader
			// blocked in the pipe's open is let go, once the test failed.
			t.Cleanup(func() {
				if w, err := os.OpenFile(files[0], os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					_ = w.Close()
				}
			})
			got := sink2.WaitCommit(t, "t", hash(c1))
			stop()
			assert.Equal(t, watcher.ReasonInitial, got.Reason)
			assert.Equal(t, 1, log.count("checkpoint unreadable"), "reported once:\n%s", log)
			fi, err := os.Lstat(files[0])
			require.NoError(t, err)
			assert.True(t, fi.Mode().IsRegular(), "the record is rewritten as a file: %s", fi.Mode())
		})
	}
}
