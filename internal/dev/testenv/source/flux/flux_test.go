package flux_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/mirror"
	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/internal/dev/testenv"
	"github.com/modwatch/modwatch/source/flux"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

var gitRepos = schema.GroupVersionResource{Group: flux.Group, Version: "v1", Resource: "gitrepositories"}

func TestRevision(t *testing.T) {
	tests := []struct {
		ref   map[string]string
		want  string
		watch bool
	}{
		{nil, "refs/heads/master", true},
		{map[string]string{}, "refs/heads/master", true},
		{map[string]string{"branch": ""}, "refs/heads/master", true},
		{map[string]string{"branch": "main"}, "refs/heads/main", true},
		{map[string]string{"branch": "main", "tag": "v1"}, "refs/tags/v1", true},
		{map[string]string{"tag": "v1", "semver": ">=1.0.0"}, "refs/tags/v1", true},
		{map[string]string{"branch": "main", "semver": ">=1.0.0"}, "semver:>=1.0.0", true},
		{map[string]string{"semver": ">=1.0.0", "name": "refs/pull/1/head"}, "refs/pull/1/head", true},
		{map[string]string{"name": "refs/heads/x", "commit": "0123456789012345678901234567890123456789"}, "", false},
	}
	for _, tt := range tests {
		got, watch := flux.Revision(tt.ref)
		assert.Equal(t, tt.want, got, "%v", tt.ref)
		assert.Equal(t, tt.watch, watch, "%v", tt.ref)
	}
}

// run runs src and returns each set it hands over.
func run(t *testing.T, src *flux.Source) <-chan []watcher.Target {
	sets := make(chan []watcher.Target, 100)
	watchertest.Run(t, func(ctx context.Context) error {
		return src.Run(ctx, func(ts []watcher.Target) { sets <- ts })
	})
	return sets
}

// waitSet waits for a set that satisfies ok.
func waitSet(t *testing.T, sets <-chan []watcher.Target, what string, ok func([]watcher.Target) bool) []watcher.Target {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ts := <-sets:
			if ok(ts) {
				return ts
			}
		case <-timeout:
			t.Fatalf("no set with %s", what)
		}
	}
}

func gitRepository(ns, name, url string, spec map[string]any) *unstructured.Unstructured {
	s := map[string]any{"url": url, "interval": "5m"}
	for k, v := range spec {
		s[k] = v
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
		"metadata": map[string]any{"name": name, "namespace": ns}, "spec": s,
	}}
}

func create(t *testing.T, u *unstructured.Unstructured) {
	t.Helper()
	_, err := env.Dynamic.Resource(gitRepos).Namespace(u.GetNamespace()).Create(context.Background(), u, metav1.CreateOptions{})
	require.NoError(t, err)
}

func byID(ts []watcher.Target) map[string]watcher.Target {
	m := map[string]watcher.Target{}
	for _, t := range ts {
		m[t.ID] = t
	}
	return m
}

func TestGitRepositoriesBecomeTargets(t *testing.T) {
	ns := env.Namespace(t)
	_, err := env.Kube.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: ns},
		Data:       map[string][]byte{"username": []byte("git"), "password": []byte("pw"), "ca.crt": []byte("PEM")},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	create(t, gitRepository(ns, "apps", "https://git.example.com/apps.git", map[string]any{
		"ref": map[string]any{"branch": "main"}, "secretRef": map[string]any{"name": "creds"}}))
	create(t, gitRepository(ns, "pinned", "https://git.example.com/apps.git", map[string]any{
		"ref": map[string]any{"commit": "0123456789012345678901234567890123456789"}}))
	create(t, gitRepository(ns, "paused", "https://git.example.com/apps.git", map[string]any{"suspend": true}))
	create(t, gitRepository(ns, "elsewhere", "https://github.com/org/repo.git", nil))
	create(t, gitRepository(ns, "nosecret", "https://git.example.com/x.git", map[string]any{"secretRef": map[string]any{"name": "missing"}}))
	create(t, gitRepository(ns, "head", "https://git.example.com/head.git", map[string]any{
		"ignore": "# mine\n/*\n!/deploy\n", "sparseCheckout": []any{"deploy", "base"}, "recurseSubmodules": true}))

	sets := run(t, flux.New(env.Kube, env.Dynamic, flux.Config{Namespace: ns, Hosts: []string{"git.example.com"}}))
	got := byID(waitSet(t, sets, "apps, head, paused and nosecret", func(ts []watcher.Target) bool { return len(ts) == 4 }))
	assert.ErrorContains(t, got["flux/"+ns+"/nosecret"].Unwatched(), "missing",
		"named though its Secret cannot be read: not watched, and what its sinks did stays")
	assert.NoError(t, got["flux/"+ns+"/apps"].Unwatched())
	apps := got["flux/"+ns+"/apps"]
	assert.Equal(t, "refs/heads/main", apps.Revision)
	require.NotNil(t, apps.Auth)
	assert.Equal(t, "git", apps.Auth.Username)
	assert.Equal(t, "pw", apps.Auth.Password)
	assert.Equal(t, "PEM", string(apps.Auth.CABundle))
	assert.Equal(t, "secret:"+ns+"/creds", apps.Auth.ID, "a rotated Secret keeps its mirror")
	p := apps.Payload.(payload.GitRepository)
	assert.Equal(t, payload.GitRepository{APIVersion: "source.toolkit.fluxcd.io/v1", Namespace: ns, Name: "apps", UID: p.UID, Generation: 1}, p)
	assert.NotEmpty(t, p.UID)
	head := got["flux/"+ns+"/head"]
	assert.Equal(t, "refs/heads/master", head.Revision, "no ref: Flux's master, whatever the remote's HEAD")
	assert.Equal(t, []string{"deploy", "base"}, head.Paths, "sparseCheckout")
	assert.True(t, head.RecurseSubmodules)
	assert.False(t, apps.RecurseSubmodules, "off by default, as in Flux")
	assert.Equal(t, []string{".git/", ".gitignore", ".gitmodules", ".gitattributes", "# mine", "/*", "!/deploy", ""}, head.Ignore,
		"the VCS files, then spec.ignore")
	assert.Contains(t, apps.Ignore, "*.png", "no spec.ignore: Flux's default exclusions")
	assert.Contains(t, apps.Ignore, ".git/")
	assert.Equal(t, ".sourceignore", apps.IgnoreFile)
	assert.True(t, got["flux/"+ns+"/paused"].Suspend, "spec.suspend: watched, not delivered")
	assert.False(t, apps.Suspend)
	// pinned (nothing can change) and elsewhere (another host) are not
	// this program's to watch.
}

var crdsGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// gitRepositoryCRD removes and installs Flux's GitRepository CRD.
type gitRepositoryCRD struct {
	ext *apiextensions.Clientset
	crd *apiextensionsv1.CustomResourceDefinition
}

func newGitRepositoryCRD(t *testing.T) *gitRepositoryCRD {
	ext, err := apiextensions.NewForConfig(env.Config)
	require.NoError(t, err)
	crds, err := testenv.CRDs()
	require.NoError(t, err)
	for _, c := range crds {
		if c.Spec.Group == flux.Group {
			return &gitRepositoryCRD{ext: ext, crd: c}
		}
	}
	t.Fatal("no GitRepository CRD")
	return nil
}

func (c *gitRepositoryCRD) remove(t *testing.T) {
	t.Helper()
	err := c.ext.ApiextensionsV1().CustomResourceDefinitions().Delete(context.Background(), c.crd.Name, metav1.DeleteOptions{})
	require.NoError(t, err)
	env.WaitFor(t, crdsGVR, "", c.crd.Name, "the CRD gone", func(u *unstructured.Unstructured) bool { return u == nil })
}

func (c *gitRepositoryCRD) install(t *testing.T) {
	t.Helper()
	_, err := c.ext.ApiextensionsV1().CustomResourceDefinitions().Create(context.Background(), c.crd.DeepCopy(), metav1.CreateOptions{})
	require.NoError(t, err)
	env.WaitFor(t, crdsGVR, "", c.crd.Name, "the CRD established", func(u *unstructured.Unstructured) bool {
		if u == nil {
			return false
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			if m, _ := c.(map[string]any); m["type"] == "Established" && m["status"] == "True" {
				return true
			}
		}
		return false
	})
}

func TestFluxInstalledLaterOrRemovedIsFollowed(t *testing.T) {
	crd := newGitRepositoryCRD(t)
	crd.remove(t)
	installed := false
	t.Cleanup(func() {
		if !installed {
			crd.install(t) // for the tests that follow
		}
	})

	ns := env.Namespace(t)
	sets := run(t, flux.New(env.Kube, env.Dynamic, flux.Config{Namespace: ns, CRDCheckInterval: 100 * time.Millisecond}))
	assert.Empty(t, waitSet(t, sets, "the empty set while Flux is absent", func([]watcher.Target) bool { return true }))

	crd.install(t)
	create(t, gitRepository(ns, "late", "https://git.example.com/late.git", nil))
	ts := waitSet(t, sets, "the GitRepository created after Flux was installed", func(ts []watcher.Target) bool { return len(ts) == 1 })
	assert.Equal(t, "flux/"+ns+"/late", ts[0].ID)

	crd.remove(t)
	waitSet(t, sets, "no targets once Flux is removed", func(ts []watcher.Target) bool { return len(ts) == 0 })
	crd.install(t)
	installed = true
	create(t, gitRepository(ns, "again", "https://git.example.com/again.git", nil))
	waitSet(t, sets, "Flux back", func(ts []watcher.Target) bool { return len(ts) == 1 && ts[0].ID == "flux/"+ns+"/again" })
}

// provider: github takes a GitHub App installation token, from Flux's
// Secret keys, for the App's host.
func TestProviderGitHub(t *testing.T) {
	ns := env.Namespace(t)
	var exchanges atomic.Int32
	api := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v3/app/installations/7/access_tokens" || !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
			http.NotFound(w, r)
			return
		}
		exchanges.Add(1)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"token":"ghs_installation","expires_at":%q}`, time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	}))
	defer api.Close()
	host := strings.TrimPrefix(api.URL, "https://")
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	_, err = env.Kube.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns},
		Data: map[string][]byte{
			"githubAppID": []byte("123"), "githubAppInstallationID": []byte("7"),
			"githubAppPrivateKey": pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}),
			"githubAppBaseURL":    []byte(api.URL + "/api/v3"),
			"ca.crt":              pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: api.Certificate().Raw}),
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	create(t, gitRepository(ns, "app", "https://"+host+"/acme/app.git", map[string]any{
		"provider": "github", "secretRef": map[string]any{"name": "app"}}))
	create(t, gitRepository(ns, "other", "https://git.example.com/acme/app.git", map[string]any{
		"provider": "github", "secretRef": map[string]any{"name": "app"}}))
	create(t, gitRepository(ns, "azure", "https://"+host+"/acme/app.git", map[string]any{"provider": "azure"}))

	sets := run(t, flux.New(env.Kube, env.Dynamic, flux.Config{Namespace: ns}))
	got := byID(waitSet(t, sets, "the app, and the two named", func(ts []watcher.Target) bool { return len(ts) == 3 }))
	a := got["flux/"+ns+"/app"].Auth
	require.NotNil(t, a)
	assert.Equal(t, "x-access-token", a.Username)
	assert.Equal(t, "ghs_installation", a.Password)
	assert.Equal(t, "github-app:123/7", a.ID)
	assert.Equal(t, int32(1), exchanges.Load(), "the token is kept")
	// other (not on the App's host: the token does not go there) and azure
	// (a provider not supported) are named, not watched.
	assert.Error(t, got["flux/"+ns+"/other"].Unwatched())
	assert.ErrorContains(t, got["flux/"+ns+"/azure"].Unwatched(), "azure")
}

// spec.verify becomes the target's Verify, with its mode (Flux's older
// "head" too) and every key of its Secret.
func TestVerify(t *testing.T) {
	ns := env.Namespace(t)
	_, keyA := gittest.SigningKey(t, "a")
	_, keyB := gittest.SigningKey(t, "b")
	_, keyC := gittest.SSHSigningKey(t, "c")
	_, err := env.Kube.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "keys", Namespace: ns},
		Data:       map[string][]byte{"a.asc": []byte(keyA), "b.asc": []byte(keyB), "c.sshpub": []byte(keyC)},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	create(t, gitRepository(ns, "signed", "https://git.example.com/apps.git", map[string]any{
		"verify": map[string]any{"mode": "HEAD", "secretRef": map[string]any{"name": "keys"}}}))
	create(t, gitRepository(ns, "tagged", "https://git.example.com/apps.git", map[string]any{
		"ref":    map[string]any{"tag": "v1"},
		"verify": map[string]any{"mode": "Tag", "secretRef": map[string]any{"name": "keys"}}}))
	create(t, gitRepository(ns, "old", "https://git.example.com/apps.git", map[string]any{
		"verify": map[string]any{"mode": "head", "secretRef": map[string]any{"name": "keys"}}}))

	sets := run(t, flux.New(env.Kube, env.Dynamic, flux.Config{Namespace: ns}))
	got := byID(waitSet(t, sets, "all three", func(ts []watcher.Target) bool { return len(ts) == 3 }))
	assert.Equal(t, watcher.VerifyTag, got["flux/"+ns+"/tagged"].Verify.Mode)
	assert.Equal(t, watcher.VerifyHEAD, got["flux/"+ns+"/old"].Verify.Mode)
	v := got["flux/"+ns+"/signed"].Verify
	require.NotNil(t, v)
	assert.Equal(t, watcher.VerifyHEAD, v.Mode)
	ring, err := mirror.ParseKeyRing(v.KeyRing)
	require.NoError(t, err)
	assert.Len(t, ring.OpenPGP, 2, "every key of the Secret")
	assert.Len(t, ring.SSH, 1, "its SSH keys too")
}

// proxySecretRef: the GitRepository's repository is reached through the
// proxy its Secret names, with its credentials, end to end.
func TestProxySecretRef(t *testing.T) {
	ns := env.Namespace(t)
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/behind-proxy")
	commit := repo.Commit(t, "one", gittest.File("app.yaml", "a"))
	proxy := gittest.NewProxy(t, "squid", "pr0xy-s3cret")
	_, err := env.Kube.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "proxy", Namespace: ns},
		Data:       map[string][]byte{"address": []byte(proxy.URL()), "username": []byte("squid"), "password": []byte("pr0xy-s3cret")},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	create(t, gitRepository(ns, "app", repo.URL(), map[string]any{"proxySecretRef": map[string]any{"name": "proxy"}, "ref": map[string]any{"branch": "main"}}))
	create(t, gitRepository(ns, "nowhere", repo.URL(), map[string]any{"proxySecretRef": map[string]any{"name": "missing"}}))

	sink := watchertest.NewSink("rec")
	w := watchertest.NewWatcher(t)
	require.NoError(t, w.Route(flux.New(env.Kube, env.Dynamic, flux.Config{Namespace: ns}), sink))
	watchertest.Run(t, w.Run)
	got := sink.WaitCommit(t, "flux/"+ns+"/app", named(commit))
	a := got.Target.Auth
	require.NotNil(t, a)
	assert.Equal(t, "proxy:"+ns+"/proxy", a.ID)
	assert.Positive(t, proxy.Passed.Load(), "the repository was reached through the proxy")
	assert.Zero(t, proxy.Refused.Load())
	for _, c := range sink.Delivered() {
		assert.NotEqual(t, "flux/"+ns+"/nowhere", c.Target.ID, "a missing proxy Secret is not a direct connection")
	}
}

// named is the commit a test repository named in hex.
func named(commit string) gitutil.Hash {
	h, err := gitutil.ParseHash(commit)
	if err != nil {
		panic(err)
	}
	return h
}

// A reconcile request (the requestedAt annotation) is handed at once in
// the payload of a program that serves artifacts, which acknowledges it;
// a program that notifies Flux hands none (its own annotate sink sets the
// annotation: a request in its payload would deliver again, and annotate
// again).
func TestAReconcileRequestIsHandedToAnArtifactsProgram(t *testing.T) {
	ns := env.Namespace(t)
	create(t, gitRepository(ns, "apps", "https://git.example.com/apps.git", map[string]any{"ref": map[string]any{"branch": "main"}}))
	artifacts := run(t, flux.New(env.Kube, env.Dynamic, flux.Config{Namespace: ns, Artifacts: true}))
	notify := run(t, flux.New(env.Kube, env.Dynamic, flux.Config{Namespace: ns}))
	requested := func(ts []watcher.Target) string {
		if len(ts) != 1 {
			return "no target"
		}
		return ts[0].Payload.(payload.GitRepository).RequestedAt
	}
	waitSet(t, artifacts, "apps", func(ts []watcher.Target) bool { return requested(ts) == "" })
	waitSet(t, notify, "apps", func(ts []watcher.Target) bool { return requested(ts) == "" })

	patch := []byte(`{"metadata":{"annotations":{"reconcile.fluxcd.io/requestedAt":"req-1"}}}`)
	_, err := env.Dynamic.Resource(gitRepos).Namespace(ns).Patch(context.Background(), "apps", types.MergePatchType, patch, metav1.PatchOptions{})
	require.NoError(t, err)
	waitSet(t, artifacts, "the request", func(ts []watcher.Target) bool { return requested(ts) == "req-1" })
	for wait := time.After(time.Second); ; {
		select {
		case ts := <-notify:
			require.Empty(t, requested(ts), "a request handed to a program that notifies Flux")
			continue
		case <-wait:
		}
		break
	}
	// A spec change hands it a set: with no request in it.
	_, err = env.Dynamic.Resource(gitRepos).Namespace(ns).Patch(context.Background(), "apps", types.MergePatchType, []byte(`{"spec":{"interval":"6m"}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	waitSet(t, notify, "generation 2", func(ts []watcher.Target) bool {
		return len(ts) == 1 && ts[0].Payload.(payload.GitRepository).Generation == 2 && requested(ts) == ""
	})
}
