package kustomize_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/sink/apply"
	"github.com/modwatch/modwatch/sink/apply/kustomize"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// renderSink renders each change as the apply sink does a plain path's
// (RenderRepo over Change.Root) and reports, as it does, what the render
// says it read; it keeps the value of each ConfigMap rendered, by target
// and commit.
type renderSink struct {
	*watchertest.Sink
	mu     sync.Mutex
	values map[string]string // target/commit/name → data.v
}

func (s *renderSink) DeliverReport(ctx context.Context, c watcher.Change) (any, error) {
	objs, reads, err := kustomize.New().RenderRepo(ctx, c.Root, c.Target.Path, payload.Render{})
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	for _, o := range objs {
		v, _, _ := unstructured.NestedString(o.Object, "data", "v")
		s.values[c.Target.ID+"/"+c.To.String()+"/"+o.GetName()] = v
	}
	s.mu.Unlock()
	return &apply.Result{Target: c.Target.ID, Commit: c.To, Read: reads}, s.Deliver(ctx, c)
}

func (s *renderSink) value(id, commit, name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.values[id+"/"+commit+"/"+name]
}

func configMap(name, v string) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\ndata:\n  v: \"" + v + "\"\n"
}

// A kustomization whose base is a symlinked directory outside its path, a
// base file that is a link out of the base, and a reference outside the
// path to a link: a commit that changes only what a link leads to is
// rendered and delivered (the render says nothing of the links: the
// watcher sees them resolved); one that changes nothing read is not.
func TestRenderThroughLinksIsDeliveredWhenTheirTargetsChange(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "1",
		gittest.File("apps/x/kustomization.yaml", "resources: [base]\n"),
		gittest.Symlink("apps/x/base", "../../shared/base"),
		gittest.File("shared/base/kustomization.yaml", "resources: [cm.yaml, deploy.yaml]\n"),
		gittest.Symlink("shared/base/cm.yaml", "../../common/cm.yaml"),
		gittest.File("common/cm.yaml", configMap("common", "1")),
		gittest.File("shared/base/deploy.yaml", configMap("deploy", "1")),
		gittest.File("apps/y/kustomization.yaml", "resources: [../../shared/ptr]\n"),
		gittest.Symlink("shared/ptr", "../other/base"),
		gittest.File("other/base/kustomization.yaml", "resources: [cm.yaml]\n"),
		gittest.File("other/base/cm.yaml", configMap("other", "1")),
		gittest.File("docs/x", "1"))
	sink := &renderSink{Sink: watchertest.NewSink("kustomize"), values: map[string]string{}}
	obs := watchertest.NewObserver()
	w := watcher.New(watcher.WithCacheDir(t.TempDir()), watcher.WithInterval(time.Hour), watcher.WithObserver(obs),
		watcher.WithRetryBackoff(watcher.Backoff{Min: 10 * time.Millisecond, Max: 100 * time.Millisecond}))
	x := watcher.Target{ID: "x", URL: repo.URL(), Path: "apps/x"}
	y := watcher.Target{ID: "y", URL: repo.URL(), Path: "apps/y"}
	require.NoError(t, w.Route(watchertest.NewSource(x, y), sink))
	watchertest.Run(t, w.Run)
	sink.WaitCommit(t, "x", hash(c1))
	sink.WaitCommit(t, "y", hash(c1))
	assert.Equal(t, "1", sink.value("x", c1, "common"))
	assert.Equal(t, "1", sink.value("y", c1, "other"))
	event := func(typ watcher.EventType, id, commit string) {
		t.Helper()
		obs.WaitFor(t, string(typ)+" "+id+" at "+commit, func(e watcher.Event) bool {
			return watchertest.Is(typ, id)(e) && e.Commit.String() == commit
		})
	}

	for _, step := range []struct {
		what       string
		changes    []gittest.Change
		target     string // delivered; the other is up to date
		name, want string // what it renders then
	}{
		{"a file a link in the base leads to", []gittest.Change{gittest.File("common/cm.yaml", configMap("common", "2"))}, "x", "common", "2"},
		{"a file of the linked base", []gittest.Change{gittest.File("shared/base/deploy.yaml", configMap("deploy", "2"))}, "x", "deploy", "2"},
		{"what a link outside the path leads to", []gittest.Change{gittest.File("other/base/cm.yaml", configMap("other", "2"))}, "y", "other", "2"},
		{"a link outside the path, retargeted", []gittest.Change{
			gittest.File("third/base/kustomization.yaml", "resources: [cm.yaml]\n"),
			gittest.File("third/base/cm.yaml", configMap("other", "3")),
			gittest.Symlink("shared/ptr", "../third/base"),
		}, "y", "other", "3"},
		{"what the retargeted link leads to", []gittest.Change{gittest.File("third/base/cm.yaml", configMap("other", "4"))}, "y", "other", "4"},
	} {
		c := repo.Commit(t, step.what, step.changes...)
		require.True(t, w.Trigger(repo.URL()))
		sink.WaitCommit(t, step.target, hash(c))
		assert.Equal(t, step.want, sink.value(step.target, c, step.name), step.what)
		other := "x"
		if step.target == "x" {
			other = "y"
		}
		event(watcher.EventDelivered, step.target, c)
		event(watcher.EventUpToDate, other, c)
	}

	n := len(sink.Delivered())
	c := repo.Commit(t, "neither", gittest.File("docs/x", "2"), gittest.File("other/base/cm.yaml", configMap("other", "5")))
	require.True(t, w.Trigger(repo.URL()))
	event(watcher.EventUpToDate, "x", c)
	event(watcher.EventUpToDate, "y", c)
	assert.Len(t, sink.Delivered(), n, "what a link led to before is read no more")
}

// hash is the commit a test repository named in hex.
func hash(commit string) gitutil.Hash {
	h, err := gitutil.ParseHash(commit)
	if err != nil {
		panic(err)
	}
	return h
}
