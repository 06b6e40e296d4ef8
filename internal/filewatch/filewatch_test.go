package filewatch_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/modwatch/modwatch/internal/filewatch"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type change struct {
	data string
	err  error
}

func TestWatchReportsEachContentOnce(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.yaml")
	changes := make(chan change, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- filewatch.Watch(ctx, path, 50*time.Millisecond, logr.Discard(), func(data []byte, err error) {
			changes <- change{string(data), err}
		})
	}()
	next := func() change {
		t.Helper()
		select {
		case c := <-changes:
			return c
		case <-time.After(10 * time.Second):
			t.Fatal("no change reported")
			return change{}
		}
	}
	assert.True(t, errors.Is(next().err, fs.ErrNotExist), "a missing file at start")
	require.NoError(t, os.WriteFile(path, []byte("one"), 0o644))
	assert.Equal(t, change{data: "one"}, next())
	require.NoError(t, os.WriteFile(path, []byte("one"), 0o644)) // the same content: nothing
	require.NoError(t, os.WriteFile(filepath.Join(dir, "other"), []byte("x"), 0o644))
	require.NoError(t, os.WriteFile(path, []byte("two"), 0o644))
	assert.Equal(t, change{data: "two"}, next(), "the rewrite of the same content was not reported")
	require.NoError(t, os.Remove(path))
	assert.True(t, errors.Is(next().err, fs.ErrNotExist))
	cancel()
	require.NoError(t, <-done)
	assert.Empty(t, changes)

	err := filewatch.Watch(context.Background(), filepath.Join(dir, "no", "f"), time.Millisecond, logr.Discard(), func([]byte, error) {})
	assert.ErrorContains(t, err, "no")
}
