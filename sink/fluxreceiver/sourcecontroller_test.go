package fluxreceiver_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/modwatch/modwatch/internal/gittest"
	"github.com/modwatch/modwatch/internal/testenv/fluxtest"
	"github.com/modwatch/modwatch/sink/fluxreceiver"
)

// artifactAt waits until the GitRepository's artifact, made by the real
// source-controller, is at commit.
func artifactAt(t *testing.T, ns, name, commit string, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	want := "main@sha1:" + commit
	for {
		u, err := env.Dynamic.Resource(gitRepos).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
		require.NoError(t, err)
		got, _, _ := unstructured.NestedString(u.Object, "status", "artifact", "revision")
		if got == want {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			t.Fatalf("the artifact of %s/%s is at %q after %s, not %q", ns, name, got, limit, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Flux's own source-controller, built from its module, reconciles a
// GitRepository every ten minutes; the annotate sink makes its artifact
// reach a pushed commit within seconds, and confirms it by the artifact.
func TestRealSourceControllerFollowsAPushAtOnce(t *testing.T) {
	fluxtest.StartSourceController(t, env.Config)
	f := start(t, fluxreceiver.Config{Mode: fluxreceiver.ModeAnnotate, ConfirmTimeout: 30 * time.Second})
	c1 := f.repo.Commit(t, "init", gittest.File("deploy/app.yaml", "a: 1"))
	createGitRepository(t, f.ns, "apps", f.repo.URL()) // interval: 10m
	artifactAt(t, f.ns, "apps", c1, time.Minute)
	f.delivered(t, c1)

	c2 := f.repo.Commit(t, "push", gittest.File("deploy/app.yaml", "a: 2"))
	f.w.Trigger(f.repo.URL()) // the push hint
	took := artifactAt(t, f.ns, "apps", c2, 30*time.Second)
	f.delivered(t, c2) // confirmed by the artifact's revision
	t.Logf("push → artifact at the commit: %s (the GitRepository's interval: 10m)", took)
}
