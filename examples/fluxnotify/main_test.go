package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"sync/atomic"
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
	"github.com/modwatch/modwatch/sink/fluxreceiver"
	"github.com/modwatch/modwatch/source/webhook"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

var gitRepos = schema.GroupVersionResource{Group: "source.toolkit.fluxcd.io", Version: "v1", Resource: "gitrepositories"}

func TestAPushHintReachesFluxAtOnce(t *testing.T) {
	ns := env.Namespace(t)
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "platform/apps")
	var head atomic.Value // the commit source-controller would see
	head.Store(repo.Commit(t, "init", gittest.File("a.yaml", "a: 1")))
	rcv := fluxtest.Start(t, env.Dynamic, env.Kube)
	// Play source-controller: each accepted request makes the artifact fresh.
	rcv.OnAccepted = func(ns, name string) {
		client := env.Dynamic.Resource(gitRepos).Namespace(ns)
		u, err := client.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return
		}
		_ = unstructured.SetNestedMap(u.Object, map[string]any{"path": "p", "url": "u", "revision": "main@sha1:" + head.Load().(string),
			"lastUpdateTime": time.Now().UTC().Format(time.RFC3339)}, "status", "artifact")
		_, _ = client.UpdateStatus(context.Background(), u, metav1.UpdateOptions{})
	}
	t.Setenv("MODWATCH_GENERIC_SECRET", "hint-secret")
	hints, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)

	obs := watchertest.NewObserver()
	watchertest.Run(t, func(ctx context.Context) error {
		return run(ctx, options{kube: env.Config, notify: fluxreceiver.Config{ReceiverURL: rcv.URL}, cacheDir: t.TempDir(),
			interval: time.Hour, hints: hints, log: testr.New(t), observer: obs})
	})

	_, err = env.Dynamic.Resource(gitRepos).Namespace(ns).Create(context.Background(), &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
		"metadata": map[string]any{"name": "apps", "namespace": ns},
		"spec":     map[string]any{"url": repo.URL(), "interval": "10m", "ref": map[string]any{"branch": "main"}},
	}}, metav1.CreateOptions{})
	require.NoError(t, err)
	delivered := func(commit string) {
		obs.WaitFor(t, "Flux notified of "+commit, func(e watcher.Event) bool {
			return e.Type == watcher.EventDelivered && e.Commit.String() == commit
		})
	}
	delivered(head.Load().(string))
	require.Equal(t, int64(1), rcv.Accepted())

	// A push, and its hint: polled and notified at once, not in an hour.
	head.Store(repo.Commit(t, "bump", gittest.File("a.yaml", "a: 2")))
	body := []byte(`{"repository": "` + repo.URL() + `"}`)
	req, err := http.NewRequest(http.MethodPost, "http://"+hints.Addr().String()+"/", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("X-Signature", webhook.Sign("hint-secret", body))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Less(t, resp.StatusCode, 300, resp.Status)
	delivered(head.Load().(string))
	assert.Equal(t, int64(2), rcv.Accepted(), "one signed notification per push")
}
