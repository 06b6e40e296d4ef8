package helm_test

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
	"github.com/modwatch/modwatch/sink/apply/helm"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// renderSink renders each change as the apply sink does a plain path's
// (RenderRepo over Change.Root) and reports, as it does, what the render
// says it read; it keeps the data of each ConfigMap rendered, by commit.
type renderSink struct {
	*watchertest.Sink
	rs     payload.Render
	mu     sync.Mutex
	values map[string]map[string]string // commit/name → data
}

func (s *renderSink) DeliverReport(ctx context.Context, c watcher.Change) (any, error) {
	objs, reads, err := helm.New().RenderRepo(ctx, c.Root, c.Target.Path, s.rs)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	for _, o := range objs {
		data, _, _ := unstructured.NestedStringMap(o.Object, "data")
		s.values[c.To.String()+"/"+o.GetName()] = data
	}
	s.mu.Unlock()
	return &apply.Result{Target: c.Target.ID, Commit: c.To, Read: reads}, s.Deliver(ctx, c)
}

func (s *renderSink) data(commit, name string) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.values[commit+"/"+name]
}

// A chart whose values.yaml, a value file and a template are links out
// of its path: a commit that changes only what a link leads to is
// rendered and delivered; one that changes nothing read is not.
func TestChartReadThroughLinksIsDeliveredWhenTheirTargetsChange(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "1",
		gittest.File("charts/web/Chart.yaml", "apiVersion: v2\nname: web\nversion: 0.1.0\n"),
		gittest.Symlink("charts/web/values.yaml", "../../common/values.yaml"),
		gittest.File("common/values.yaml", "greeting: hello\nsize: small\n"),
		gittest.Symlink("charts/web/prod.yaml", "../../envs/prod.yaml"),
		gittest.File("envs/prod.yaml", "size: large\n"),
		gittest.File("charts/web/templates/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  greeting: {{ .Values.greeting | quote }}\n  size: {{ .Values.size | quote }}\n"),
		gittest.Symlink("charts/web/templates/extra.yaml", "../../../shared/extra.yaml"),
		gittest.File("shared/extra.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra\ndata:\n  v: \"1\"\n"),
		gittest.File("docs/x", "1"))
	sink := &renderSink{Sink: watchertest.NewSink("helm"), values: map[string]map[string]string{},
		rs: payload.Render{Helm: &payload.Helm{ReleaseName: "web", ValueFiles: []string{"prod.yaml"}}}}
	obs := watchertest.NewObserver()
	w := watcher.New(watcher.WithCacheDir(t.TempDir()), watcher.WithInterval(time.Hour), watcher.WithObserver(obs),
		watcher.WithRetryBackoff(watcher.Backoff{Min: 10 * time.Millisecond, Max: 100 * time.Millisecond}))
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "web", URL: repo.URL(), Path: "charts/web"}), sink))
	watchertest.Run(t, w.Run)
	sink.WaitCommit(t, "web", hash(c1))
	assert.Equal(t, map[string]string{"greeting": "hello", "size": "large"}, sink.data(c1, "web"))
	assert.Equal(t, map[string]string{"v": "1"}, sink.data(c1, "extra"))

	for _, step := range []struct {
		what    string
		changes []gittest.Change
		name    string
		want    map[string]string
	}{
		{"the values.yaml a link leads to", []gittest.Change{gittest.File("common/values.yaml", "greeting: hi\nsize: small\n")},
			"web", map[string]string{"greeting": "hi", "size": "large"}},
		{"the value file a link leads to", []gittest.Change{gittest.File("envs/prod.yaml", "size: huge\n")},
			"web", map[string]string{"greeting": "hi", "size": "huge"}},
		{"the template a link leads to", []gittest.Change{gittest.File("shared/extra.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra\ndata:\n  v: \"2\"\n")},
			"extra", map[string]string{"v": "2"}},
	} {
		c := repo.Commit(t, step.what, step.changes...)
		require.True(t, w.Trigger(repo.URL()))
		sink.WaitCommit(t, "web", hash(c))
		assert.Equal(t, step.want, sink.data(c, step.name), step.what)
	}

	n := len(sink.Delivered())
	c := repo.Commit(t, "neither", gittest.File("docs/x", "2"))
	require.True(t, w.Trigger(repo.URL()))
	obs.WaitFor(t, "up to date", func(e watcher.Event) bool { return e.Type == watcher.EventUpToDate && e.Commit == hash(c) })
	assert.Len(t, sink.Delivered(), n, "a commit that changes nothing read is not delivered")
}

// hash is the commit a test repository named in hex.
func hash(commit string) gitutil.Hash {
	h, err := gitutil.ParseHash(commit)
	if err != nil {
		panic(err)
	}
	return h
}
