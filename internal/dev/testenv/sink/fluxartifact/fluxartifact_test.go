package fluxartifact_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/internal/dev/testenv"
	"github.com/modwatch/modwatch/internal/dev/testenv/fluxtest"
	"github.com/modwatch/modwatch/sink/fluxartifact"
	"github.com/modwatch/modwatch/source/flux"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

var gitRepos = schema.GroupVersionResource{Group: "source.toolkit.fluxcd.io", Version: "v1", Resource: "gitrepositories"}

// executable writes an executable file.
func executable(path, content string) gittest.Change {
	return func(t gittest.TB, work string) {
		gittest.File(path, content)(t, work)
		if err := os.Chmod(filepath.Join(work, path), 0o755); err != nil {
			t.Fatalf("%v", err)
		}
	}
}

func createGitRepository(t *testing.T, ns, name, url string) {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"url": url, "interval": "10m", "ref": map[string]any{"branch": "main"}},
	}}
	_, err := env.Dynamic.Resource(gitRepos).Namespace(ns).Create(context.Background(), u, metav1.CreateOptions{})
	require.NoError(t, err)
}

// artifactOf waits until the GitRepository's artifact is at revision and
// its URL begins with prefix, and returns the object.
func artifactOf(t *testing.T, ns, name, revision, prefix string) *unstructured.Unstructured {
	t.Helper()
	var got string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		u, err := env.Dynamic.Resource(gitRepos).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
		require.NoError(t, err)
		got, _, _ = unstructured.NestedString(u.Object, "status", "artifact", "revision")
		url, _, _ := unstructured.NestedString(u.Object, "status", "artifact", "url")
		if got == revision && strings.HasPrefix(url, prefix) {
			return u
		}
	}
	t.Fatalf("the artifact of %s/%s is at %q, not %q from %s", ns, name, got, revision, prefix)
	return nil
}

// server is the sink, served on loopback, and a watcher of the namespace's
// GitRepositories delivering to it.
type server struct {
	url         string
	storage     string
	cache       string // the watcher's, and its checkpoints'
	checkpoints string
	w           *watcher.Watcher
	sink        atomic.Pointer[fluxartifact.Sink]
	stop        func() // the program: its watcher and sink
}

func serve(t *testing.T, ns string, cfg fluxartifact.Config) *server {
	t.Helper()
	s := &server{storage: t.TempDir(), cache: t.TempDir(), checkpoints: t.TempDir()}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.sink.Load().Handler().ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	s.url = srv.URL
	s.start(t, ns, cfg)
	return s
}

// start starts the program: a sink of the server's storage, served at
// its address, and a watcher of the server's cache delivering to it; its
// source reads the Secrets again every second.
func (s *server) start(t *testing.T, ns string, cfg fluxartifact.Config) {
	t.Helper()
	cfg.Storage, cfg.Address = s.storage, strings.TrimPrefix(s.url, "http://")
	sink, err := fluxartifact.New(env.Dynamic, cfg)
	require.NoError(t, err)
	s.sink.Store(sink)
	store, err := watcher.NewFileStore(s.checkpoints) // kept through a restart
	require.NoError(t, err)
	s.w = watcher.New(watcher.WithCacheDir(s.cache), watcher.WithStore(store), watcher.WithObserver(sink)) // its failures' conditions
	stopSink := watchertest.Run(t, sink.Run)
	require.NoError(t, s.w.Route(flux.New(env.Kube, env.Dynamic, flux.Config{Namespace: ns, Artifacts: true, RefreshInterval: time.Second}), sink))
	stopWatcher := watchertest.Run(t, s.w.Run)
	var once sync.Once
	s.stop = func() {
		once.Do(func() {
			stopWatcher()
			stopSink()
			_ = sink.Close()
		})
	}
	t.Cleanup(s.stop)
}

func field(u *unstructured.Unstructured, path ...string) any {
	v, _, _ := unstructured.NestedFieldCopy(u.Object, path...)
	return v
}

// For the same commit the sink's artifact is source-controller's, byte for
// byte: the real source-controller makes one, is stopped, and the sink
// serves the same GitRepository: the same path, revision, digest and size,
// and its server hands out those bytes. Then a push makes a new artifact,
// and the old ones go past the count kept.
func TestTheArtifactIsSourceControllers(t *testing.T) {
	sc := fluxtest.StartSourceController(t, env.Config)
	ns := env.Namespace(t)
	repo := gittest.NewServer(t).NewRepo(t, "platform/apps")
	c1 := repo.Commit(t, "init",
		gittest.File("deploy/app.yaml", "kind: ConfigMap\n"),
		gittest.File("deploy/nested/more.yaml", "kind: Secret\n"),
		executable("deploy/run.sh", "#!/bin/sh\necho hi\n"),
		gittest.File("README.md", "# apps\n"),
		gittest.File("logo.png", "not a png"),    // Flux's default exclusions
		gittest.File("img/only.png", "an image"), // a folder of excluded files only
		gittest.File(".github/workflows/ci.yaml", "on: push\n"),
		gittest.Symlink("deploy/link.yaml", "app.yaml"), // links are left out
	)
	createGitRepository(t, ns, "apps", repo.URL())
	theirs := artifactOf(t, ns, "apps", "main@sha1:"+c1, "http://")
	sc.Stop()

	s := serve(t, ns, fluxartifact.Config{Records: 2, TTL: time.Hour})
	ours := artifactOf(t, ns, "apps", "main@sha1:"+c1, s.url)
	for _, f := range []string{"path", "revision", "digest", "size"} {
		assert.Equal(t, field(theirs, "status", "artifact", f), field(ours, "status", "artifact", f), f)
	}
	url, _, _ := unstructured.NestedString(ours.Object, "status", "artifact", "url")
	assert.Equal(t, s.url+"/gitrepository/"+ns+"/apps/"+c1+".tar.gz", url)
	resp, err := http.Get(url)
	require.NoError(t, err)
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	sum := sha256.Sum256(data)
	assert.Equal(t, field(theirs, "status", "artifact", "digest"), "sha256:"+hex.EncodeToString(sum[:]), "the bytes served")

	assert.Equal(t, ours.GetGeneration(), field(ours, "status", "observedGeneration"))
	conds, _, _ := unstructured.NestedSlice(ours.Object, "status", "conditions")
	ready := map[string]any{}
	for _, c := range conds {
		if m := c.(map[string]any); m["type"] == "Ready" {
			ready = m
		}
	}
	assert.Equal(t, "True", ready["status"])
	assert.Equal(t, "Succeeded", ready["reason"])
	assert.Equal(t, "stored artifact for revision 'main@sha1:"+c1+"'", ready["message"])

	// Pushes: a new artifact each, two kept.
	c2 := repo.Commit(t, "two", gittest.File("deploy/app.yaml", "kind: ConfigMap\ndata: {}\n"))
	s.w.Trigger(repo.URL())
	second := artifactOf(t, ns, "apps", "main@sha1:"+c2, s.url)
	assert.NotEqual(t, field(ours, "status", "artifact", "digest"), field(second, "status", "artifact", "digest"))
	c3 := repo.Commit(t, "three", gittest.File("deploy/app.yaml", "kind: ConfigMap\ndata: {a: b}\n"))
	s.w.Trigger(repo.URL())
	artifactOf(t, ns, "apps", "main@sha1:"+c3, s.url)
	// The old ones are collected after the status is written.
	want := []string{c2 + ".tar.gz", c3 + ".tar.gz", "latest.tar.gz"}
	slices.Sort(want)
	var names []string
	require.Eventually(t, func() bool {
		stored, err := filepath.Glob(filepath.Join(s.storage, "gitrepository", ns, "apps", "*.tar.gz"))
		if err != nil {
			return false
		}
		names = names[:0]
		for _, p := range stored {
			names = append(names, filepath.Base(p))
		}
		slices.Sort(names)
		return slices.Equal(want, names)
	}, 30*time.Second, 20*time.Millisecond, "the last two, and the link")

	// Deleted: source-controller's finalizer, which it put on the object,
	// goes with the artifacts, and so does the object.
	client := env.Dynamic.Resource(gitRepos).Namespace(ns)
	u, err := client.Get(context.Background(), "apps", metav1.GetOptions{})
	require.NoError(t, err)
	require.Contains(t, u.GetFinalizers(), fluxartifact.Finalizer, "source-controller's, on the object it served")
	require.NoError(t, client.Delete(context.Background(), "apps", metav1.DeleteOptions{}))
	require.Eventually(t, func() bool {
		_, err := client.Get(context.Background(), "apps", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}, time.Minute, 50*time.Millisecond, "the GitRepository gone")
	_, err = os.Stat(filepath.Join(s.storage, "gitrepository", ns, "apps"))
	assert.ErrorIs(t, err, fs.ErrNotExist, "its artifacts gone")
}

// A new generation of the GitRepository is a new target: its artifact is
// written again, observing that generation. A delivery of a target made
// from an earlier generation writes nothing.
func TestAnArtifactObservesItsGeneration(t *testing.T) {
	ns := env.Namespace(t)
	repo := gittest.NewServer(t).NewRepo(t, "platform/apps")
	c1 := repo.Commit(t, "init", gittest.File("deploy/app.yaml", "kind: ConfigMap\n"))
	createGitRepository(t, ns, "apps", repo.URL())
	s := serve(t, ns, fluxartifact.Config{})
	first := artifactOf(t, ns, "apps", "main@sha1:"+c1, s.url)
	assert.Equal(t, int64(1), field(first, "status", "observedGeneration"))

	client := env.Dynamic.Resource(gitRepos).Namespace(ns)
	first.Object["spec"].(map[string]any)["ignore"] = "/*\n!/deploy\n"
	_, err := client.Update(context.Background(), first, metav1.UpdateOptions{})
	require.NoError(t, err)
	var u *unstructured.Unstructured
	require.Eventually(t, func() bool {
		u, err = client.Get(context.Background(), "apps", metav1.GetOptions{})
		require.NoError(t, err)
		return field(u, "status", "observedGeneration") == int64(2)
	}, time.Minute, 50*time.Millisecond)
	assert.Equal(t, "/*\n!/deploy\n", field(u, "status", "observedIgnore"))
	assert.Equal(t, "main@sha1:"+c1, field(u, "status", "artifact", "revision"))

	// A target of generation 1, delivered late, is refused.
	stale, err := fluxartifact.New(env.Dynamic, fluxartifact.Config{Storage: t.TempDir(), Address: "stale.invalid"})
	require.NoError(t, err)
	defer stale.Close()
	err = stale.Deliver(context.Background(), watcher.Change{
		Target: watcher.Target{ID: "flux/" + ns + "/apps", URL: repo.URL(), Revision: "refs/heads/main",
			Payload: payload.GitRepository{APIVersion: "source.toolkit.fluxcd.io/v1", Namespace: ns, Name: "apps", UID: string(u.GetUID()), Generation: 1}},
		Ref: "refs/heads/main", To: gitutil.Hash{1}, FS: fstest.MapFS{"f": {Data: []byte("old")}},
	})
	require.ErrorContains(t, err, "generation 2, its target was made from 1")
	after, err := client.Get(context.Background(), "apps", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, field(u, "status"), field(after, "status"), "nothing written")
}

// requestReconcile sets the GitRepository's reconcile request annotation
// to at, as `flux reconcile source git` does.
func requestReconcile(t *testing.T, ns, name, at string) {
	t.Helper()
	patch := []byte(`{"metadata":{"annotations":{"reconcile.fluxcd.io/requestedAt":"` + at + `"}}}`)
	_, err := env.Dynamic.Resource(gitRepos).Namespace(ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{})
	require.NoError(t, err)
}

// handledAt waits until the GitRepository acknowledges the reconcile
// request at, and returns the object as it was then.
func handledAt(t *testing.T, ns, name, at string) *unstructured.Unstructured {
	t.Helper()
	return waitFor(t, ns, name, "the request "+at+" acknowledged", func(u *unstructured.Unstructured) bool {
		return field(u, "status", "lastHandledReconcileAt") == at
	})
}

// waitFor waits until the GitRepository is as done says, and returns it.
func waitFor(t *testing.T, ns, name, what string, done func(*unstructured.Unstructured) bool) *unstructured.Unstructured {
	t.Helper()
	var u *unstructured.Unstructured
	require.Eventually(t, func() bool {
		var err error
		u, err = env.Dynamic.Resource(gitRepos).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
		require.NoError(t, err)
		return done(u)
	}, time.Minute, 20*time.Millisecond, what)
	return u
}

// A reconcile request (`flux reconcile source git`: the requestedAt
// annotation) polls the repository at once, and is acknowledged
// (status.lastHandledReconcileAt) with the artifact of what the poll
// found: a push made before the request is in the status that
// acknowledges it, with an interval of ten minutes. A request with no
// push is acknowledged with the same artifact, its time kept; a request
// while the repository fails is acknowledged with the failure.
func TestAReconcileRequestIsAcknowledged(t *testing.T) {
	ns := env.Namespace(t)
	git := gittest.NewServer(t)
	repo := git.NewRepo(t, "platform/apps")
	c1 := repo.Commit(t, "init", gittest.File("deploy/app.yaml", "kind: ConfigMap\n"))
	createGitRepository(t, ns, "apps", repo.URL())
	s := serve(t, ns, fluxartifact.Config{})
	first := artifactOf(t, ns, "apps", "main@sha1:"+c1, s.url)
	assert.Nil(t, field(first, "status", "lastHandledReconcileAt"), "no request yet")

	c2 := repo.Commit(t, "two", gittest.File("deploy/app.yaml", "kind: ConfigMap\ndata: {}\n"))
	requestReconcile(t, ns, "apps", "req-1")
	u := handledAt(t, ns, "apps", "req-1")
	assert.Equal(t, "main@sha1:"+c2, field(u, "status", "artifact", "revision"), "the push before the request, in the status that acknowledges it")
	updated := field(u, "status", "artifact", "lastUpdateTime")

	requestReconcile(t, ns, "apps", "req-2")
	u = handledAt(t, ns, "apps", "req-2")
	assert.Equal(t, "main@sha1:"+c2, field(u, "status", "artifact", "revision"))
	assert.Equal(t, updated, field(u, "status", "artifact", "lastUpdateTime"), "the same artifact: its time kept")

	git.Deny("platform/apps.git", 404)
	requestReconcile(t, ns, "apps", "req-3")
	u = handledAt(t, ns, "apps", "req-3")
	assert.Equal(t, "False", conditionOf(u, "Ready")["status"], "acknowledged with the failure")
	assert.Equal(t, "main@sha1:"+c2, field(u, "status", "artifact", "revision"), "the artifact kept")
}

// conditionOf is u's condition of type t, or nil.
func conditionOf(u *unstructured.Unstructured, t string) map[string]any {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == t {
			return m
		}
	}
	return nil
}

// A commit that changes nothing a GitRepository selects (spec.ignore
// leaves it out) makes an artifact of that commit, as source-controller's
// does: its revision moves, its digest stays.
func TestACommitOutsideWhatItSelectsKeepsTheDigest(t *testing.T) {
	ns := env.Namespace(t)
	repo := gittest.NewServer(t).NewRepo(t, "platform/apps")
	c1 := repo.Commit(t, "init", gittest.File("deploy/app.yaml", "kind: ConfigMap\n"), gittest.File("docs/README.md", "# one\n"))
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
		"metadata": map[string]any{"name": "apps", "namespace": ns},
		"spec": map[string]any{"url": repo.URL(), "interval": "10m", "ref": map[string]any{"branch": "main"},
			"ignore": "/*\n!/deploy/\n"},
	}}
	_, err := env.Dynamic.Resource(gitRepos).Namespace(ns).Create(context.Background(), u, metav1.CreateOptions{})
	require.NoError(t, err)
	s := serve(t, ns, fluxartifact.Config{})
	first := artifactOf(t, ns, "apps", "main@sha1:"+c1, s.url)

	c2 := repo.Commit(t, "docs", gittest.File("docs/README.md", "# two\n"))
	s.w.Trigger(repo.URL())
	second := artifactOf(t, ns, "apps", "main@sha1:"+c2, s.url)
	assert.Equal(t, field(first, "status", "artifact", "digest"), field(second, "status", "artifact", "digest"), "nothing it selects changed")
	assert.Equal(t, "gitrepository/"+ns+"/apps/"+c2+".tar.gz", field(second, "status", "artifact", "path"))

	c3 := repo.Commit(t, "deploy", gittest.File("deploy/app.yaml", "kind: ConfigMap\ndata: {}\n"))
	s.w.Trigger(repo.URL())
	third := artifactOf(t, ns, "apps", "main@sha1:"+c3, s.url)
	assert.NotEqual(t, field(second, "status", "artifact", "digest"), field(third, "status", "artifact", "digest"))
}
