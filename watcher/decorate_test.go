package watcher_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// everything is a sink that does all a sink can: it reports, removes and
// runs, and has a name.
type everything struct {
	*watchertest.Sink
	ran chan struct{}
}

func (e *everything) DeliverReport(ctx context.Context, c watcher.Change) (any, error) {
	return "report of " + c.To.String(), e.Deliver(ctx, c)
}

func (e *everything) Run(ctx context.Context) error {
	close(e.ran)
	<-ctx.Done()
	return nil
}

// A decorated sink keeps its name (its checkpoints), its report, its
// Remove and its Run; the decorator runs around every delivery.
func TestDecorateKeepsWhatTheSinkDoes(t *testing.T) {
	git, repo := memoryRemote()
	commit := repo.Commit(t, map[string]string{"a": "1"})
	inner := &everything{Sink: watchertest.NewSink("apply"), ran: make(chan struct{})}
	var around []string
	logged := watcher.Decorate(inner, func(ctx context.Context, c watcher.Change, next watcher.NextFunc) (any, error) {
		around = append(around, "before "+c.To.String())
		return next(ctx, c)
	})
	obs := watchertest.NewObserver()
	src := watchertest.NewSource(watcher.Target{ID: "a", URL: repo.URL()})
	w := watchertest.NewWatcher(t, watcher.WithObserver(obs), watcher.WithGit(git))
	require.NoError(t, w.Route(src, logged))
	watchertest.Run(t, w.Run)

	<-inner.ran
	e := obs.WaitFor(t, "the delivery", watchertest.Is(watcher.EventDelivered, "a"))
	assert.Equal(t, "apply", e.Sink, "the wrapped sink's name, so its checkpoints")
	assert.Equal(t, "report of "+commit.String(), e.Result)
	assert.Equal(t, []string{"before " + commit.String()}, around)
	src.Set()
	inner.WaitRemoved(t, "a")
}

// Named names a sink and keeps the rest; a filter made with Decorate can
// skip a delivery.
func TestNamedAndFilter(t *testing.T) {
	git, repo := memoryRemote()
	commit := repo.Commit(t, map[string]string{"a": "1"})
	var calls []string
	plain := watcher.SinkFunc(func(_ context.Context, c watcher.Change) error {
		calls = append(calls, c.Target.ID)
		return nil
	})
	onlyB := watcher.Decorate(watcher.Named("plain", plain), func(ctx context.Context, c watcher.Change, next watcher.NextFunc) (any, error) {
		if c.Target.ID != "b" {
			return nil, nil
		}
		return next(ctx, c)
	})
	obs := watchertest.NewObserver()
	w := watchertest.NewWatcher(t, watcher.WithObserver(obs), watcher.WithGit(git))
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "a", URL: repo.URL()}, watcher.Target{ID: "b", URL: repo.URL()}), onlyB))
	watchertest.Run(t, w.Run)
	obs.WaitCount(t, "both deliveries", 2, func(e watcher.Event) bool { return e.Type == watcher.EventDelivered && e.Commit == commit })
	assert.Equal(t, []string{"b"}, calls)
	for _, e := range obs.Events() {
		if e.Type == watcher.EventDelivered {
			assert.Equal(t, "plain", e.Sink)
		}
	}
}

// A sink's name keys its checkpoints, so it cannot come from the order of
// the sinks: an unnamed sink beside others and two sinks of one name are
// refused; a route's only sink needs no name.
func TestRouteNeedsSinksNamedApart(t *testing.T) {
	nop := watcher.SinkFunc(func(context.Context, watcher.Change) error { return nil })
	assert.NoError(t, watcher.New().Route(watchertest.NewSource(), nop), "the only sink: named "+watcher.DefaultSinkName)
	for name, sinks := range map[string][]watcher.Sink{
		"unnamed beside another": {nop, watchertest.NewSink("dir")},
		"two unnamed":            {nop, nop},
		"one name twice":         {watchertest.NewSink("dir"), watchertest.NewSink("dir")},
		"a wrapped name twice":   {watchertest.NewSink("dir"), watcher.Decorate(watchertest.NewSink("dir"), nil)},
		"an empty name":          {watcher.Named("", nop)},
		"one Named name twice":   {watcher.Named("x", nop), watcher.Named("x", nop)},
	} {
		w := watcher.New()
		err := w.Route(watchertest.NewSource(), sinks...)
		assert.True(t, errors.Is(err, watcher.ErrUnnamedSink), "%s: %v", name, err)
	}
	w := watcher.New()
	assert.NoError(t, w.Route(watchertest.NewSource(), watcher.Named("a", nop), watcher.Named("b", nop), watchertest.NewSink("dir"),
		watcher.Chain("publish", nop, nop)), "named apart; a chain's steps need no names")
}
