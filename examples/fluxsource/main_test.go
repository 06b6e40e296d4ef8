package main

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/internal/dev/testenv"
	"github.com/modwatch/modwatch/internal/dev/testenv/fluxtest"
	"github.com/modwatch/modwatch/sink/fluxartifact"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

var gitRepos = schema.GroupVersionResource{Group: "source.toolkit.fluxcd.io", Version: "v1", Resource: "gitrepositories"}

func create(t *testing.T, ns, name string, spec map[string]any) {
	t.Helper()
	_, err := env.Dynamic.Resource(gitRepos).Namespace(ns).Create(context.Background(), &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
		"metadata": map[string]any{"name": name, "namespace": ns}, "spec": spec,
	}}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// files lists the regular files of the artifact at url.
func files(t *testing.T, url string) []string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	gz, err := gzip.NewReader(resp.Body)
	require.NoError(t, err)
	tr := tar.NewReader(gz)
	var out []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			sort.Strings(out)
			return out
		}
		require.NoError(t, err)
		if h.Typeflag == tar.TypeReg {
			out = append(out, h.Name)
		}
	}
}

// The program serves GitRepositories as source-controller does, on Flux's
// own CRD: a branch and a commit pin get their artifacts, a push a new one
// at the GitRepository's interval, and to one that includes it; a
// suspended one and one that includes itself get none.
func TestGitRepositoriesAreServed(t *testing.T) {
	fluxtest.InstallCRDs(t, env.Config)
	ns := env.Namespace(t)
	repo := gittest.NewServer(t).NewRepo(t, "platform/apps")
	c1 := repo.Commit(t, "init", gittest.File("deploy/app.yaml", "kind: ConfigMap\n"), gittest.File("docs/logo.png", "x"))
	storage, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := storage.Addr().String()
	obs := watchertest.NewObserver()
	watchertest.Run(t, func(ctx context.Context) error {
		return run(ctx, options{kube: env.Config, storage: storage, cacheDir: t.TempDir(), log: testr.New(t), observer: obs,
			artifacts: fluxartifact.Config{Storage: t.TempDir(), Address: addr}})
	})

	create(t, ns, "apps", map[string]any{"url": repo.URL(), "interval": "1s", "ref": map[string]any{"branch": "main"}})
	create(t, ns, "pinned", map[string]any{"url": repo.URL(), "interval": "1h", "ref": map[string]any{"commit": c1}})
	create(t, ns, "paused", map[string]any{"url": repo.URL(), "interval": "1s", "suspend": true})
	create(t, ns, "included", map[string]any{"url": repo.URL(), "interval": "1s", "ref": map[string]any{"branch": "main"},
		"include": []any{map[string]any{"repository": map[string]any{"name": "apps"}}}})

	artifact := func(name, revision string) string {
		t.Helper()
		var got string
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			u, err := env.Dynamic.Resource(gitRepos).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
			require.NoError(t, err)
			got, _, _ = unstructured.NestedString(u.Object, "status", "artifact", "revision")
			if got == revision {
				url, _, _ := unstructured.NestedString(u.Object, "status", "artifact", "url")
				assert.True(t, strings.HasPrefix(url, "http://"+addr+"/gitrepository/"+ns+"/"+name+"/"), url)
				return url
			}
		}
		t.Fatalf("%s's artifact is at %q, not %q", name, got, revision)
		return ""
	}
	assert.Equal(t, []string{"deploy/app.yaml"}, files(t, artifact("apps", "main@sha1:"+c1)), "Flux's default exclusions")
	assert.Equal(t, []string{"deploy/app.yaml"}, files(t, artifact("pinned", "sha1:"+c1)))

	// A push: at the GitRepository's interval (1s; the watcher's own is a
	// minute), a new artifact.
	c2 := repo.Commit(t, "two", gittest.File("deploy/more.yaml", "kind: Secret\n"))
	assert.Equal(t, []string{"deploy/app.yaml", "deploy/more.yaml"}, files(t, artifact("apps", "main@sha1:"+c2)))

	// A ref that is not there: Flux's conditions of a failed fetch, as the
	// real source-controller writes them, and no artifact.
	create(t, ns, "nobranch", map[string]any{"url": repo.URL(), "interval": "1s", "ref": map[string]any{"branch": "nope"}})
	conds := map[string]map[string]any{}
	require.Eventually(t, func() bool {
		u, err := env.Dynamic.Resource(gitRepos).Namespace(ns).Get(context.Background(), "nobranch", metav1.GetOptions{})
		require.NoError(t, err)
		list, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range list {
			m := c.(map[string]any)
			conds[m["type"].(string)] = m
		}
		return len(conds) == 3
	}, time.Minute, 50*time.Millisecond)
	for ty, want := range map[string][2]string{"Ready": {"False", "GitOperationFailed"}, "FetchFailed": {"True", "GitOperationFailed"}, "Reconciling": {"True", "ProgressingWithRetry"}} {
		assert.Equal(t, want[0], conds[ty]["status"], ty)
		assert.Equal(t, want[1], conds[ty]["reason"], ty)
	}
	assert.Contains(t, conds["Ready"]["message"], "refs/heads/nope")

	// An include: apps' artifact in the including one's, at apps/, and
	// its new artifact after a push put in again.
	require.Eventually(t, func() bool {
		u, err := env.Dynamic.Resource(gitRepos).Namespace(ns).Get(context.Background(), "included", metav1.GetOptions{})
		require.NoError(t, err)
		url, _, _ := unstructured.NestedString(u.Object, "status", "artifact", "url")
		return url != "" && slices.Equal(files(t, url), []string{"apps/deploy/app.yaml", "apps/deploy/more.yaml", "deploy/app.yaml", "deploy/more.yaml"})
	}, time.Minute, 100*time.Millisecond, "apps included")

	create(t, ns, "selfish", map[string]any{"url": repo.URL(), "interval": "1s",
		"include": []any{map[string]any{"repository": map[string]any{"name": "selfish"}}}})
	obs.WaitFor(t, "an include of itself refused by name", func(e watcher.Event) bool {
		return e.Target != nil && e.Target.ID == "flux/"+ns+"/selfish" && e.Err != nil && strings.Contains(e.Err.Error(), "a cycle: selfish includes selfish")
	})
	for _, name := range []string{"paused", "selfish", "nobranch"} {
		u, err := env.Dynamic.Resource(gitRepos).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
		require.NoError(t, err)
		_, has, _ := unstructured.NestedMap(u.Object, "status", "artifact")
		assert.False(t, has, "%s has no artifact", name)
	}
}
