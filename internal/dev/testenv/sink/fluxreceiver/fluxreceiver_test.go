package fluxreceiver_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	notifyv1 "github.com/fluxcd/notification-controller/api/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/internal/dev/testenv"
	"github.com/modwatch/modwatch/internal/dev/testenv/fluxtest"
	"github.com/modwatch/modwatch/sink/fluxreceiver"
	"github.com/modwatch/modwatch/source/flux"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
	"github.com/modwatch/modwatch/watcher/signature"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

var gitRepos = schema.GroupVersionResource{Group: "source.toolkit.fluxcd.io", Version: "v1", Resource: "gitrepositories"}

func createGitRepository(t testing.TB, ns, name, url string) *unstructured.Unstructured {
	return createGitRepositoryEvery(t, ns, name, url, "10m")
}

// createGitRepositoryEvery makes a GitRepository reconciled every interval.
func createGitRepositoryEvery(t testing.TB, ns, name, url, interval string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"url": url, "interval": interval, "ref": map[string]any{"branch": "main"}},
	}}
	got, err := env.Dynamic.Resource(gitRepos).Namespace(ns).Create(context.Background(), u, metav1.CreateOptions{})
	require.NoError(t, err)
	return got
}

// setArtifact plays source-controller: the GitRepository's artifact is now
// at commit.
func setArtifact(t *testing.T, ns, name, commit string) {
	client := env.Dynamic.Resource(gitRepos).Namespace(ns)
	u, err := client.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Errorf("get %s: %v", name, err)
		return
	}
	_ = unstructured.SetNestedMap(u.Object, map[string]any{
		"path": "gitrepository/x.tar.gz", "url": "http://source-controller/x.tar.gz",
		"revision": "main@sha1:" + commit, "lastUpdateTime": time.Now().UTC().Format(time.RFC3339),
		// Required by source-controller's own CRD, which another test
		// installs in the same control plane.
		"digest": "sha256:" + strings.Repeat("0", 64),
	}, "status", "artifact")
	if _, err := client.UpdateStatus(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		t.Errorf("artifact of %s: %v", name, err)
	}
}

type fixture struct {
	ns   string
	repo *gittest.Repo
	w    *watcher.Watcher
	obs  *watchertest.Observer
	rcv  *fluxtest.Receiver
	sink *fluxreceiver.Sink
}

// start runs the Flux source into the receiver sink, for the GitRepository
// "apps" of a new repository.
func start(t testing.TB, cfg fluxreceiver.Config) *fixture {
	t.Helper()
	f := &fixture{ns: env.Namespace(t), obs: watchertest.NewObserver()}
	srv := gittest.NewServer(t)
	f.repo = srv.NewRepo(t, "platform/apps")
	f.rcv = fluxtest.Start(t, env.Dynamic, env.Kube)
	cfg.ReceiverURL = f.rcv.URL
	var err error
	f.sink, err = fluxreceiver.New(env.Dynamic, cfg)
	require.NoError(t, err)
	f.w = watcher.New(watcher.WithCacheDir(t.TempDir()), watcher.WithInterval(time.Hour),
		watcher.WithRetryBackoff(watcher.Backoff{Min: 10 * time.Millisecond, Max: 200 * time.Millisecond}), watcher.WithObserver(f.obs))
	src := flux.New(env.Kube, env.Dynamic, flux.Config{Namespace: f.ns})
	require.NoError(t, f.w.Route(src, f.sink))
	watchertest.Run(t, f.w.Run)
	return f
}

func (f *fixture) delivered(t testing.TB, commit string) {
	t.Helper()
	f.obs.WaitFor(t, "the delivery of "+commit, func(e watcher.Event) bool {
		return e.Type == watcher.EventDelivered && e.Commit.String() == commit
	})
}

func TestPushIsNotifiedThroughAManagedReceiver(t *testing.T) {
	f := start(t, fluxreceiver.Config{DisableConfirm: true})
	c1 := f.repo.Commit(t, "init", gittest.File("a.yaml", "a: 1"))
	repo := createGitRepository(t, f.ns, "apps", f.repo.URL())
	f.delivered(t, c1)
	require.Equal(t, int64(1), f.rcv.Accepted(), "the first delivery is one signed POST")

	// The Receiver and its Secret: owned by the GitRepository, labelled,
	// written by our field manager.
	name := "modwatch-apps"
	rcv, err := env.Dynamic.Resource(fluxreceiver.ReceiverGVR).Namespace(f.ns).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	sec, err := env.Kube.CoreV1().Secrets(f.ns).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	for _, obj := range []metav1.Object{rcv, sec} {
		refs := obj.GetOwnerReferences()
		require.Len(t, refs, 1)
		assert.Equal(t, repo.GetUID(), refs[0].UID)
		assert.Equal(t, "GitRepository", refs[0].Kind)
		assert.True(t, *refs[0].Controller)
		assert.Equal(t, "modwatch", obj.GetLabels()[fluxreceiver.LabelManagedBy])
		require.NotEmpty(t, obj.GetManagedFields())
		assert.Equal(t, "modwatch", obj.GetManagedFields()[0].Manager)
	}
	typ, _, _ := unstructured.NestedString(rcv.Object, "spec", "type")
	assert.Equal(t, "generic-hmac", typ)
	assert.GreaterOrEqual(t, len(sec.Data["token"]), 32, "a random token, not an empty one")

	// A push: exactly one more signed POST, within one poll.
	c2 := f.repo.Commit(t, "bump", gittest.File("a.yaml", "a: 2"))
	f.w.Trigger(f.repo.URL())
	f.delivered(t, c2)
	assert.Equal(t, int64(2), f.rcv.Accepted())
	for _, h := range f.rcv.Hits() {
		assert.Equal(t, http.StatusOK, h.Status)
		assert.Equal(t, f.ns+"/"+name, h.Receiver)
	}
	annotated, err := env.Dynamic.Resource(gitRepos).Namespace(f.ns).Get(context.Background(), "apps", metav1.GetOptions{})
	require.NoError(t, err)
	assert.NotEmpty(t, annotated.GetAnnotations()[fluxreceiver.AnnotationRequestedAt], "the receiver asked Flux to reconcile")

	// A deleted Receiver comes back; an edited token is put back.
	require.NoError(t, env.Dynamic.Resource(fluxreceiver.ReceiverGVR).Namespace(f.ns).Delete(context.Background(), name, metav1.DeleteOptions{}))
	env.WaitFor(t, fluxreceiver.ReceiverGVR, f.ns, name, "the receiver back", func(u *unstructured.Unstructured) bool { return u != nil })
	token := sec.Data["token"]
	sec.Data["token"] = []byte("someone-else")
	_, err = env.Kube.CoreV1().Secrets(f.ns).Update(context.Background(), sec, metav1.UpdateOptions{})
	require.NoError(t, err)
	env.WaitFor(t, fluxreceiver.SecretGVR, f.ns, name, "the token put back", func(u *unstructured.Unstructured) bool {
		if u == nil {
			return false
		}
		enc, _, _ := unstructured.NestedString(u.Object, "data", "token")
		return enc == base64.StdEncoding.EncodeToString(token)
	})
	c3 := f.repo.Commit(t, "again", gittest.File("a.yaml", "a: 3"))
	f.w.Trigger(f.repo.URL())
	f.delivered(t, c3)
	assert.Equal(t, int64(3), f.rcv.Accepted())
}

func TestTheTestReceiverChecksSignatures(t *testing.T) {
	ns := env.Namespace(t)
	rcvServer := fluxtest.Start(t, env.Dynamic, env.Kube)
	token := "0123456789abcdef0123456789abcdef"
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "tok", Namespace: ns}, Data: map[string][]byte{"token": []byte(token)}}
	_, err := env.Kube.CoreV1().Secrets(ns).Create(context.Background(), secret, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = env.Dynamic.Resource(fluxreceiver.ReceiverGVR).Namespace(ns).Create(context.Background(), &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "notification.toolkit.fluxcd.io/v1", "kind": "Receiver",
		"metadata": map[string]any{"name": "r", "namespace": ns},
		"spec": map[string]any{"type": "generic-hmac", "secretRef": map[string]any{"name": "tok"},
			"resources": []any{map[string]any{"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository", "name": "apps"}}},
	}}, metav1.CreateOptions{})
	require.NoError(t, err)
	createGitRepository(t, ns, "apps", "https://git.example.com/apps.git")

	flux := &notifyv1.Receiver{}
	flux.Name, flux.Namespace = "r", ns
	path := fluxreceiver.WebhookPath(token, "r", ns)
	require.Equal(t, flux.GetWebhookPath(token), path, "our path is Flux's")

	body := []byte(`{"commit":"abc"}`)
	post := func(path, sig string) int {
		req, err := http.NewRequest(http.MethodPost, rcvServer.URL+path, bytes.NewReader(body))
		require.NoError(t, err)
		if sig != "" {
			req.Header.Set("X-Signature", sig)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusBadRequest, post(path, ""), "no signature")
	assert.Equal(t, http.StatusUnauthorized, post(path, signature.HMAC("wrong-token", body)), "a wrong token")
	assert.Equal(t, http.StatusNotFound, post(fluxreceiver.WebhookPath("wrong-token", "r", ns), signature.HMAC("wrong-token", body)), "a wrong token's path")
	assert.Equal(t, http.StatusOK, post(path, signature.HMAC(token, body)), "our signature")
}

func TestConfirmationNotifiesAgainWhileStale(t *testing.T) {
	f := start(t, fluxreceiver.Config{ConfirmTimeout: 300 * time.Millisecond})
	c1 := f.repo.Commit(t, "init", gittest.File("a.yaml", "a: 1"))
	calls := 0
	f.rcv.OnAccepted = func(ns, name string) {
		calls++
		if calls >= 2 { // Flux saw the commit only on the second request
			setArtifact(t, ns, name, c1)
		}
	}
	createGitRepository(t, f.ns, "apps", f.repo.URL())
	f.delivered(t, c1)
	assert.Equal(t, int64(2), f.rcv.Accepted(), "a stale artifact gets a second notification")

	c2 := f.repo.Commit(t, "bump", gittest.File("a.yaml", "a: 2"))
	f.rcv.OnAccepted = func(ns, name string) { setArtifact(t, ns, name, c2) }
	f.w.Trigger(f.repo.URL())
	f.delivered(t, c2)
	assert.Equal(t, int64(3), f.rcv.Accepted(), "a fresh artifact: no second notification")

	// Delivered again (a restart of the agent): Flux has c2, nobody is told.
	u, err := env.Dynamic.Resource(gitRepos).Namespace(f.ns).Get(context.Background(), "apps", metav1.GetOptions{})
	require.NoError(t, err)
	again := watcher.Change{To: named(c2), Reason: watcher.ReasonInitial, Target: watcher.Target{ID: "flux/" + f.ns + "/apps", URL: f.repo.URL(),
		Payload: payload.GitRepository{APIVersion: "source.toolkit.fluxcd.io/v1", Namespace: f.ns, Name: "apps", UID: string(u.GetUID())}}}
	require.NoError(t, f.sink.Deliver(context.Background(), again))
	assert.Equal(t, int64(3), f.rcv.Accepted(), "an artifact already at the commit needs no notification")
}

func TestAnnotateMode(t *testing.T) {
	f := start(t, fluxreceiver.Config{Mode: fluxreceiver.ModeAnnotate, DisableConfirm: true})
	c1 := f.repo.Commit(t, "init", gittest.File("a.yaml", "a: 1"))
	createGitRepository(t, f.ns, "apps", f.repo.URL())
	f.delivered(t, c1)
	u, err := env.Dynamic.Resource(gitRepos).Namespace(f.ns).Get(context.Background(), "apps", metav1.GetOptions{})
	require.NoError(t, err)
	at, err := time.Parse(time.RFC3339Nano, u.GetAnnotations()[fluxreceiver.AnnotationRequestedAt])
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now(), at, time.Minute)
	_, err = env.Dynamic.Resource(fluxreceiver.ReceiverGVR).Namespace(f.ns).Get(context.Background(), "modwatch-apps", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "no Receiver in annotate mode")
	assert.Zero(t, f.rcv.Accepted())
}

// named is the commit a test repository named in hex.
func named(commit string) gitutil.Hash {
	h, err := gitutil.ParseHash(commit)
	if err != nil {
		panic(err)
	}
	return h
}
