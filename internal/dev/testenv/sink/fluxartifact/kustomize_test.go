package fluxartifact_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/internal/dev/testenv/fluxtest"
	"github.com/modwatch/modwatch/sink/fluxartifact"
)

var kustomizations = schema.GroupVersionResource{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Resource: "kustomizations"}

// gitRepository creates a GitRepository of url, reading ref, with the
// spec fields in more.
func gitRepository(t *testing.T, ns, name, url string, ref map[string]any, more map[string]any) {
	t.Helper()
	spec := map[string]any{"url": url, "interval": "10m", "ref": ref}
	for k, v := range more {
		spec[k] = v
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
		"metadata": map[string]any{"name": name, "namespace": ns}, "spec": spec,
	}}
	_, err := env.Dynamic.Resource(gitRepos).Namespace(ns).Create(context.Background(), u, metav1.CreateOptions{})
	require.NoError(t, err)
}

// kustomization creates a Kustomization applying ./deploy of the
// GitRepository source into ns, its objects' names prefixed with prefix.
func kustomization(t *testing.T, ns, source, prefix string) {
	t.Helper()
	spec := map[string]any{"interval": "10m", "path": "./deploy", "prune": true, "targetNamespace": ns,
		"sourceRef": map[string]any{"kind": "GitRepository", "name": source}}
	if prefix != "" {
		spec["namePrefix"] = prefix
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
		"metadata": map[string]any{"name": source, "namespace": ns}, "spec": spec,
	}}
	_, err := env.Dynamic.Resource(kustomizations).Namespace(ns).Create(context.Background(), u, metav1.CreateOptions{})
	require.NoError(t, err)
}

// applied waits until kustomize-controller has applied revision of the
// Kustomization name, and its ConfigMap cm says v.
func applied(t *testing.T, ns, name, revision, cm, v string) {
	t.Helper()
	var got, data string
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		u, err := env.Dynamic.Resource(kustomizations).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
		require.NoError(t, err)
		got, _, _ = unstructured.NestedString(u.Object, "status", "lastAppliedRevision")
		c, err := env.Kube.CoreV1().ConfigMaps(ns).Get(context.Background(), cm, metav1.GetOptions{})
		if err == nil {
			data = c.Data["v"]
		}
		if got == revision && data == v {
			return
		}
	}
	t.Fatalf("Kustomization %s/%s applied %q (ConfigMap %s says %q), not %q (%q)", ns, name, got, cm, data, revision, v)
}

// configMap is a manifest of the ConfigMap app saying v.
func configMap(v string) gittest.Change {
	return gittest.File("deploy/app.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  v: \""+v+"\"\n")
}

func setSuspend(t *testing.T, ns, name string, suspend bool) {
	t.Helper()
	patch := []byte(`{"spec":{"suspend":false}}`)
	if suspend {
		patch = []byte(`{"spec":{"suspend":true}}`)
	}
	_, err := env.Dynamic.Resource(gitRepos).Namespace(ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{})
	require.NoError(t, err)
}

// Flux's own kustomize-controller applies from the sink's artifacts: a
// private repository read with a Secret (basic auth, and the CA of its
// server); a push applied; a commit
// outside what the GitRepository selects moves its revision and keeps its
// digest; a tag and a semver range, the range following a new tag; a
// suspended GitRepository keeps its artifact through a push its
// neighbour on the same branch is served, and is served once resumed.
func TestKustomizeControllerAppliesTheArtifacts(t *testing.T) {
	ns := env.Namespace(t)
	git := gittest.NewTLSServer(t)
	repo := git.NewRepo(t, "platform/apps")
	c1 := repo.Commit(t, "init", configMap("1"), gittest.File("docs/README.md", "# one\n"))
	repo.Tag(t, "v1.0.0", true)
	git.SetBasicAuth("flux", "s3cret")
	_, err := env.Kube.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds"}, StringData: map[string]string{"username": "flux", "password": "s3cret", "ca.crt": string(git.CACert())},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	main, creds := map[string]any{"branch": "main"}, map[string]any{"secretRef": map[string]any{"name": "creds"}}
	gitRepository(t, ns, "apps", repo.URL(), main, map[string]any{"ignore": "/*\n!/deploy/\n", "secretRef": creds["secretRef"]})
	gitRepository(t, ns, "witness", repo.URL(), main, creds)
	gitRepository(t, ns, "tag", repo.URL(), map[string]any{"tag": "v1.0.0"}, creds)
	gitRepository(t, ns, "range", repo.URL(), map[string]any{"semver": ">=1.0.0 <2.0.0"}, creds)
	fluxtest.StartKustomizeControllerIn(t, env.Config, ns)
	kustomization(t, ns, "apps", "")
	kustomization(t, ns, "tag", "tag-")
	kustomization(t, ns, "range", "range-")
	s := serve(t, ns, fluxartifact.Config{})
	applied(t, ns, "apps", "main@sha1:"+c1, "app", "1")
	applied(t, ns, "tag", "v1.0.0@sha1:"+c1, "tag-app", "1")
	applied(t, ns, "range", "v1.0.0@sha1:"+c1, "range-app", "1")

	c2 := repo.Commit(t, "two", configMap("2"))
	repo.Tag(t, "v1.1.0", false)
	s.w.Trigger(repo.URL())
	applied(t, ns, "apps", "main@sha1:"+c2, "app", "2")
	applied(t, ns, "range", "v1.1.0@sha1:"+c2, "range-app", "2")
	applied(t, ns, "tag", "v1.0.0@sha1:"+c1, "tag-app", "1")
	second := artifactOf(t, ns, "apps", "main@sha1:"+c2, s.url)

	c3 := repo.Commit(t, "docs", gittest.File("docs/README.md", "# two\n"))
	s.w.Trigger(repo.URL())
	applied(t, ns, "apps", "main@sha1:"+c3, "app", "2")
	third := artifactOf(t, ns, "apps", "main@sha1:"+c3, s.url)
	assert.Equal(t, field(second, "status", "artifact", "digest"), field(third, "status", "artifact", "digest"), "nothing it selects changed")

	setSuspend(t, ns, "apps", true)
	c4 := repo.Commit(t, "four", configMap("4"))
	s.w.Trigger(repo.URL())
	artifactOf(t, ns, "witness", "main@sha1:"+c4, s.url) // the same poll saw both
	held := artifactOf(t, ns, "apps", "main@sha1:"+c3, s.url)
	assert.Equal(t, field(third, "status", "artifact"), field(held, "status", "artifact"), "suspended: its artifact kept")
	applied(t, ns, "apps", "main@sha1:"+c3, "app", "2")
	setSuspend(t, ns, "apps", false)
	applied(t, ns, "apps", "main@sha1:"+c4, "app", "4")
}
