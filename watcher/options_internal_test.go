package watcher

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil"
)

// What one option sets is set once: a second (a program's, after the one
// a library handed it: gitsync's WatcherOptions, cluster.Sharded) is
// refused by name, not silently the winner.
func TestWhatOneOptionSetsIsSetOnce(t *testing.T) {
	resync := func() time.Duration { return time.Minute }
	for _, tc := range []struct {
		name string
		opts []Option
		want string
	}{
		{"twice WithResync", []Option{WithResync(time.Minute), WithResync(time.Hour)}, "resync is set 2 times (WithResync(1m0s), WithResync(1h0m0s))"},
		{"a func then a duration", []Option{WithResyncFunc(resync), WithResync(time.Hour)}, "(WithResyncFunc, WithResync(1h0m0s))"},
		{"two stores", []Option{WithStore(NewMemoryStore()), WithStore(NewMemoryStore())}, "store is set 2 times"},
		{"two credential resolvers", []Option{WithCredentials(nil), WithCredentials(nil)}, "credentials is set 2 times"},
		{"two cache directories", []Option{WithCacheDir("/a")}, `cache directory is set 2 times (WithCacheDir("/a"), WithCacheDir(`},
		{"two shards", []Option{WithShard(nil), WithShard(nil)}, "shard is set 2 times"},
		{"two Gits", []Option{WithGit(DefaultGit()), WithGit(DefaultGit())}, "Git is set 2 times"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := New(append(tc.opts, WithCacheDir(t.TempDir()))...)
			require.NoError(t, w.Route(SourceFunc(func(ctx context.Context, _ func([]Target)) error { <-ctx.Done(); return nil }),
				SinkFunc(func(context.Context, Change) error { return nil })))
			err := w.Run(logr.NewContext(context.Background(), logr.Discard()))
			require.ErrorIs(t, err, ErrInvalidOptions)
			assert.ErrorContains(t, err, tc.want)
		})
	}
	o := defaultOptions()
	for _, opt := range []Option{WithResyncFunc(resync), WithStore(NewMemoryStore()), WithCacheDir("/a"), WithInterval(time.Minute), WithInterval(time.Hour)} {
		opt(&o)
	}
	assert.NoError(t, o.validate(), "each once; a duration given twice is the last, as options go")
}

// A program that forgot to put a logger into Run's context is told once;
// one that put logr.Discard() there meant it, and is not.
func TestAContextWithoutALoggerIsSaidOnce(t *testing.T) {
	var out bytes.Buffer
	log := loggerOf(context.Background(), &out)
	assert.Equal(t, logr.Discard(), log)
	assert.Contains(t, out.String(), "carries no logger")
	assert.Equal(t, 1, bytes.Count(out.Bytes(), []byte("\n")), "one line")

	out.Reset()
	loggerOf(logr.NewContext(context.Background(), logr.Discard()), &out)
	assert.Empty(t, out.String(), "logr.Discard() in ctx: meant")

	// Through Run: the watcher says it at its start.
	out.Reset()
	w := New(WithCacheDir(t.TempDir()))
	w.opts.noLoggerOut = &out
	require.NoError(t, w.Route(SourceFunc(func(ctx context.Context, _ func([]Target)) error { return nil }),
		SinkFunc(func(context.Context, Change) error { return nil })))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, w.Run(ctx))
	assert.Contains(t, out.String(), "carries no logger")
}

// A nil Observer handed to WithObserver (a program's optional one) is left
// out: the watcher never calls it.
func TestANilObserverIsLeftOut(t *testing.T) {
	var heard []Event
	o := defaultOptions()
	WithObserver(nil, ObserverFunc(func(e Event) { heard = append(heard, e) }), nil)(&o)
	require.Len(t, o.observers, 1)
	o.observers[0].Observe(Event{Type: EventDelivered})
	assert.Len(t, heard, 1)
}

// Two watchers in one process share nothing of what their listings
// learned: each holds a Lister of its own, by default and with a GoGit
// given without one; a GoGit given with one keeps it.
func TestEachWatcherListsWithItsOwnLister(t *testing.T) {
	lister := func(opts ...Option) *gitutil.Lister {
		o := defaultOptions()
		for _, opt := range opts {
			opt(&o)
		}
		g, ok := o.git.(GoGit)
		require.True(t, ok)
		require.NotNil(t, g.Lister)
		return g.Lister
	}
	assert.NotSame(t, lister(), lister(), "the default git")
	assert.NotSame(t, lister(WithGit(GoGit{})), lister(WithGit(GoGit{})), "a GoGit without a Lister")
	shared := gitutil.NewLister()
	assert.Same(t, shared, lister(WithGit(GoGit{Lister: shared})), "a GoGit's own Lister")
}
