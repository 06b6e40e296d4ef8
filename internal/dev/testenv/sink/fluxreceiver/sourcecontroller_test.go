package fluxreceiver_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/internal/dev/testenv/fluxtest"
	"github.com/modwatch/modwatch/sink/fluxreceiver"
)

// artifactAt waits until the GitRepository's artifact, made by the real
// source-controller, is at commit.
func artifactAt(t testing.TB, ns, name, commit string, limit time.Duration) time.Duration {
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

// baseline is push → artifact when source-controller finds the push at its
// own interval, measured once for every run of the benchmark.
var baseline struct {
	once sync.Once
	took []time.Duration
}

// BenchmarkPushToArtifact is push → Flux artifact at the commit on the real
// source-controller: with the watcher's hint and the annotate sink (each
// iteration a push), against a GitRepository of the same repository left
// to its interval (15s here; Flux's own examples use 1m to 10m).
func BenchmarkPushToArtifact(b *testing.B) {
	fluxtest.StartSourceController(b, env.Config)
	f := start(b, fluxreceiver.Config{Mode: fluxreceiver.ModeAnnotate, ConfirmTimeout: 30 * time.Second})
	c := f.repo.Commit(b, "init", gittest.File("deploy/app.yaml", "a: 0"))
	createGitRepository(b, f.ns, "apps", f.repo.URL())
	artifactAt(b, f.ns, "apps", c, time.Minute)
	f.delivered(b, c)

	hinted := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		c := f.repo.Commit(b, "push", gittest.File("deploy/app.yaml", fmt.Sprintf("a: %d", i+1)))
		f.w.Trigger(f.repo.URL())
		hinted = append(hinted, artifactAt(b, f.ns, "apps", c, 30*time.Second))
	}
	b.StopTimer()

	baseline.once.Do(func() {
		polled := env.Namespace(b) // not watched: source-controller alone
		c := f.repo.Commit(b, "init", gittest.File("deploy/app.yaml", "b: 0"))
		createGitRepositoryEvery(b, polled, "apps", f.repo.URL(), "15s")
		artifactAt(b, polled, "apps", c, time.Minute)
		for i := range 3 {
			c := f.repo.Commit(b, "push", gittest.File("deploy/app.yaml", fmt.Sprintf("b: %d", i+1)))
			baseline.took = append(baseline.took, artifactAt(b, polled, "apps", c, time.Minute))
		}
	})
	h, p := median(hinted), median(baseline.took)
	b.ReportMetric(float64(h.Milliseconds()), "ms-hinted/push")
	b.ReportMetric(float64(p.Milliseconds()), "ms-interval15s/push")
	b.ReportMetric(float64(h)/float64(p), "hinted/interval")
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
