package watcher_test

import (
	"context"
	"fmt"
	"io/fs"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// putsStore is a MemoryStore that keeps the last checkpoint written.
type putsStore struct {
	*watcher.MemoryStore
	mu   sync.Mutex
	last watcher.Checkpoint
}

func (s *putsStore) Put(ctx context.Context, key string, cp watcher.Checkpoint) error {
	s.mu.Lock()
	s.last = cp
	s.mu.Unlock()
	return s.MemoryStore.Put(ctx, key, cp)
}

func (s *putsStore) lastReads() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last.Reads
}

// linkReader reads names through Change.Root, as a render does: those in
// good must be read, those in bad must fail (a link that leaves the
// repository, dangles or loops), and the sink delivers either way. It
// says nothing of what it read: the file system does.
func linkReader(good, bad []string) func(context.Context, watcher.Change) error {
	return func(_ context.Context, c watcher.Change) error {
		for _, name := range good {
			if _, err := fs.ReadFile(c.Root, name); err != nil {
				return err
			}
		}
		for _, name := range bad {
			if _, err := fs.ReadFile(c.Root, name); err == nil {
				return fmt.Errorf("%s was read", name)
			}
		}
		return nil
	}
}

// What a delivery reads through symbolic links outside its target's path
// is watched, though the sink says nothing: the link's target (a
// directory, a file, the end of a chain), and a link outside the path
// that it went through (which, retargeted, is delivered too). A link that
// leaves the repository, dangles or loops is no read, and a commit that
// changes nothing read is not delivered.
func TestWhatADeliveryReadsThroughLinksIsWatched(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "1",
		gittest.File("apps/x/k.yaml", "1"),
		gittest.Symlink("apps/x/base", "../../shared/base"),
		gittest.File("shared/base/cm.yaml", "1"),
		gittest.Symlink("apps/x/values.yaml", "../../common/values.yaml"),
		gittest.File("common/values.yaml", "1"),
		gittest.Symlink("apps/x/chain", "../../links/one"),
		gittest.Symlink("links/one", "two"),
		gittest.Symlink("links/two", "../shared/chained"),
		gittest.File("shared/chained/cm.yaml", "1"),
		gittest.Symlink("shared/other", "../third"),
		gittest.File("third/cm.yaml", "1"),
		gittest.Symlink("apps/x/escape", "../../../etc/passwd"),
		gittest.Symlink("apps/x/dangling", "../../nowhere"),
		gittest.Symlink("apps/x/loop", "loop"),
		gittest.File("docs/x", "1"))
	store := &putsStore{MemoryStore: watcher.NewMemoryStore()}
	obs, sink := watchertest.NewObserver(), watchertest.NewSink("links")
	sink.SetHook(linkReader(
		[]string{"apps/x/base/cm.yaml", "apps/x/values.yaml", "apps/x/chain/cm.yaml", "shared/other/cm.yaml"},
		[]string{"apps/x/escape", "apps/x/dangling", "apps/x/loop"}))
	w := newWatcher(t, obs, watcher.WithStore(store))
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "x", URL: repo.URL(), Path: "apps/x"}), sink))
	start(t, w)
	sink.WaitCommit(t, "x", hash(c1))
	delivered := func(c string) {
		t.Helper()
		obs.WaitFor(t, "delivered "+c, func(e watcher.Event) bool { return e.Type == watcher.EventDelivered && e.Commit == hash(c) })
	}
	delivered(c1)
	assert.Equal(t, []string{"common/values.yaml", "links/one", "links/two", "shared/base", "shared/chained", "shared/other", "third"},
		store.lastReads(), "the links outside the path and where they lead; no link that leads nowhere")

	for _, step := range []struct {
		what    string
		changes []gittest.Change
	}{
		{"a file of a linked directory", []gittest.Change{gittest.File("shared/base/cm.yaml", "2")}},
		{"a linked file", []gittest.Change{gittest.File("common/values.yaml", "2")}},
		{"the end of a chain", []gittest.Change{gittest.File("shared/chained/cm.yaml", "2")}},
		{"a link of a chain, retargeted", []gittest.Change{gittest.File("shared/chained2/cm.yaml", "1"), gittest.Symlink("links/two", "../shared/chained2")}},
		{"the target of a link outside the path", []gittest.Change{gittest.File("third/cm.yaml", "2")}},
		{"a link outside the path, retargeted", []gittest.Change{gittest.File("fourth/cm.yaml", "1"), gittest.Symlink("shared/other", "../fourth")}},
		{"a link inside the path, retargeted", []gittest.Change{gittest.File("shared/base2/cm.yaml", "1"), gittest.Symlink("apps/x/base", "../../shared/base2")}},
		{"the new target of a retargeted link", []gittest.Change{gittest.File("shared/base2/cm.yaml", "2")}},
		{"a directory on the way to a linked file, made a link", []gittest.Change{
			gittest.Delete("common"), gittest.File("common2/values.yaml", "2"), gittest.Symlink("common", "common2"),
		}},
		{"what that link leads to", []gittest.Change{gittest.File("common2/values.yaml", "3")}},
	} {
		c := repo.Commit(t, step.what, step.changes...)
		pollNow(t, w, obs, repo.URL())
		got := sink.WaitCommit(t, "x", hash(c))
		assert.Equal(t, watcher.ReasonNewCommit, got.Reason, step.what)
		delivered(c)
	}
	assert.Equal(t, []string{"common", "common2", "fourth", "links/one", "links/two", "shared/base2", "shared/chained2", "shared/other"},
		store.lastReads(), "what the links lead to now")

	n := len(sink.Delivered())
	for _, step := range []struct {
		what    string
		changes []gittest.Change
	}{
		{"neither", []gittest.Change{gittest.File("docs/x", "2")}},
		{"what a link led to before", []gittest.Change{gittest.File("shared/base/cm.yaml", "3"), gittest.File("third/cm.yaml", "3")}},
	} {
		c := repo.Commit(t, step.what, step.changes...)
		pollNow(t, w, obs, repo.URL())
		obs.WaitFor(t, step.what+": up to date", func(e watcher.Event) bool { return e.Type == watcher.EventUpToDate && e.Commit == hash(c) })
	}
	assert.Len(t, sink.Delivered(), n, "a commit that changes nothing read is not delivered")
}
