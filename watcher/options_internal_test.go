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
		{"twice WithResync", []Option{WithResync(ResyncEvery(time.Minute)), WithResync(ResyncEvery(time.Hour))}, "resync is set 2 times (WithResync, WithResync)"},
		{"a func then a fixed period", []Option{WithResync(resync), WithResync(ResyncEvery(time.Hour))}, "resync is set 2 times (WithResync, WithResync)"},
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
	for _, opt := range []Option{WithResync(resync), WithStore(NewMemoryStore()), WithCacheDir("/a"), WithInterval(time.Minute), WithInterval(time.Hour)} {
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

// A Backoff is defaulted field by field, then validated: a negative bound,
// or a Max under Min, makes Run fail, naming the option.
func TestBackoff(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   Backoff
		want Backoff
		err  string
	}{
		{name: "zero: the defaults", want: Backoff{Min: time.Second, Max: 5 * time.Minute}},
		{name: "min only", in: Backoff{Min: time.Minute}, want: Backoff{Min: time.Minute, Max: 5 * time.Minute}},
		{name: "both", in: Backoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond}, want: Backoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond}},
		{name: "equal", in: Backoff{Min: time.Hour, Max: time.Hour}, want: Backoff{Min: time.Hour, Max: time.Hour}},
		{name: "max under the default min", in: Backoff{Max: time.Millisecond}, err: "Max 1ms is under Min 1s"},
		{name: "max under min", in: Backoff{Min: time.Hour, Max: time.Minute}, err: "Max 1m0s is under Min 1h0m0s"},
		{name: "negative", in: Backoff{Min: -time.Second}, err: "negative bound"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.in
			b.Default()
			o := defaultOptions()
			WithRetryBackoff(tc.in)(&o)
			if tc.err != "" {
				assert.ErrorContains(t, b.Validate(), tc.err)
				err := o.validate()
				require.ErrorIs(t, err, ErrInvalidOptions)
				assert.ErrorContains(t, err, "WithRetryBackoff: backoff: "+tc.err)
				return
			}
			require.NoError(t, b.Validate())
			assert.Equal(t, tc.want, b)
			require.NoError(t, o.validate())
			assert.Equal(t, []time.Duration{tc.want.Min, tc.want.Max}, []time.Duration{o.retryMin, o.retryMax})
		})
	}
}

// ResyncEvery is a fixed period; none for 0 or less, as no WithResync.
func TestResyncEvery(t *testing.T) {
	assert.Nil(t, ResyncEvery(0))
	assert.Nil(t, ResyncEvery(-time.Second))
	f := ResyncEvery(time.Minute)
	require.NotNil(t, f)
	assert.Equal(t, time.Minute, f())
	assert.Equal(t, time.Minute, f())
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
