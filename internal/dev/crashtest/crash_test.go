package crashtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/sink/dir"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// The child's environment: where it works and what it watches.
const (
	envURL   = "MODWATCH_CRASH_URL"
	envCache = "MODWATCH_CRASH_CACHE"
	envStore = "MODWATCH_CRASH_STORE"
	envRoot  = "MODWATCH_CRASH_ROOT"
)

func TestMain(m *testing.M) {
	if url := os.Getenv(envURL); url != "" {
		if err := child(url); err != nil {
			fmt.Fprintln(os.Stderr, "crash child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// child runs a watcher that publishes the repository into a directory,
// with a file store, polling without pause and repacking after nearly every
// fetch, until SIGTERM (or SIGKILL).
func child(url string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	store, err := watcher.NewFileStore(os.Getenv(envStore))
	if err != nil {
		return err
	}
	w := watcher.New(watcher.WithCacheDir(os.Getenv(envCache)), watcher.WithStore(store),
		watcher.WithMinInterval(time.Millisecond), watcher.WithInterval(20*time.Millisecond), watcher.WithJitter(0),
		watcher.WithGit(watcher.GoGit{GitCLI: "git", RepackPacks: 2}), watcher.WithRetryBackoff(watcher.Backoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond}))
	if err := w.Route(watchertest.NewSource(watcher.Target{ID: "app", URL: url}), dir.New(os.Getenv(envRoot))); err != nil {
		return err
	}
	return w.Run(ctx)
}

func TestKilledAgainAndAgain(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/app")
	base := t.TempDir()
	cache, store, root := filepath.Join(base, "cache"), filepath.Join(base, "store"), filepath.Join(base, "root")
	env := append(os.Environ(), envURL+"="+repo.URL(), envCache+"="+cache, envStore+"="+store, envRoot+"="+root)
	startChild := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = env
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		return cmd
	}
	commit := func(i int) string {
		// Enough files that publishing one takes a while.
		var files []gittest.Change
		for j := range 200 {
			files = append(files, gittest.File(fmt.Sprintf("d%d/f%03d", j%5, j), strings.Repeat(fmt.Sprint(i, " "), 2000)))
		}
		files = append(files, gittest.File("version", fmt.Sprint(i)))
		return repo.Commit(t, fmt.Sprint(i), files...)
	}

	rng := rand.New(rand.NewPCG(7, 7))
	const kills = 12
	for i := range kills {
		commit(i)
		cmd := startChild()
		time.Sleep(time.Duration(50+rng.IntN(600)) * time.Millisecond)
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
	}

	commit(kills)
	cmd := startChild()
	link := filepath.Join(root, "app")
	deadline := time.Now().Add(2 * time.Minute)
	for {
		data, err := os.ReadFile(filepath.Join(link, "version"))
		if err == nil && string(data) == fmt.Sprint(kills) {
			break
		}
		require.True(t, time.Now().Before(deadline), "the latest commit was not published after the restart")
		time.Sleep(20 * time.Millisecond)
	}
	// Published whole: every file of the latest commit is there.
	for j := range 200 {
		data, err := os.ReadFile(filepath.Join(link, fmt.Sprintf("d%d/f%03d", j%5, j)))
		require.NoError(t, err)
		require.Equal(t, strings.Repeat(fmt.Sprint(kills, " "), 2000), string(data))
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait())

	// Nothing temporary survives the restart that cleaned up.
	var leftovers []string
	for _, d := range []string{cache, store, root} {
		require.NoError(t, filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			name := e.Name()
			if strings.HasPrefix(name, ".tmp-") || strings.HasPrefix(name, "tmp_") || strings.HasSuffix(name, ".clone") ||
				strings.HasSuffix(name, ".gc") || strings.HasSuffix(name, ".lock") && name != ".lock" {
				leftovers = append(leftovers, p)
			}
			return nil
		}))
	}
	assert.Empty(t, leftovers)
	trees, err := os.ReadDir(filepath.Join(root, ".trees"))
	require.NoError(t, err)
	assert.Len(t, trees, 1, "only the published tree")
	entries, err := os.ReadDir(store)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "one checkpoint, no temporary file")
}
