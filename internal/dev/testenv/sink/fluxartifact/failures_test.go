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
	"k8s.io/apimachinery/pkg/types"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/internal/dev/testenv/fluxtest"
	"github.com/modwatch/modwatch/sink/fluxartifact"
)

// conditionsOf waits until every GitRepository of names is not Ready,
// for a reason other than progressing, and, if Stalled, has observed its
// generation (the stalled state's last write), and returns each one's
// conditions, by type, as "status reason", and whether it observed its
// generation.
func conditionsOf(t *testing.T, ns string, names ...string) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	require.Eventually(t, func() bool {
		for _, name := range names {
			u, err := env.Dynamic.Resource(gitRepos).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
			require.NoError(t, err)
			if r := conditionOf(u, "Ready"); r == nil || r["status"] != "False" || r["reason"] == "Progressing" {
				return false
			}
			got := map[string]string{}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, c := range conds {
				m := c.(map[string]any)
				got[m["type"].(string)] = m["status"].(string) + " " + m["reason"].(string)
			}
			if field(u, "status", "observedGeneration") == u.GetGeneration() {
				got["observedGeneration"] = "current"
			} else if got["Stalled"] != "" {
				return false
			}
			out[name] = got
		}
		return true
	}, time.Minute, 50*time.Millisecond, "every GitRepository failed")
	return out
}

// clearStatus empties the GitRepository's status.
func clearStatus(t *testing.T, ns, name string) {
	t.Helper()
	client := env.Dynamic.Resource(gitRepos).Namespace(ns)
	u, err := client.Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	u.Object["status"] = map[string]any{}
	_, err = client.UpdateStatus(context.Background(), u, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// The conditions of a GitRepository that cannot be served are
// source-controller's: the real source-controller fails each of them and
// is stopped, their statuses are emptied, and the sink fails them again.
// A ref that is not there is retried, with the failed fetch's reason; an
// URL that cannot be parsed, and a tag verification of a branch, are
// Stalled with Flux's reasons; a Secret not there is retried, and so is
// an include of a GitRepository not there. One
// difference is the sink's: a semver that is not a range is Stalled
// (only a change of the spec clears it; source-controller tries it again
// and again), and it is served once the spec is fixed.
func TestFailuresAreSourceControllers(t *testing.T) {
	ns := env.Namespace(t)
	repo := gittest.NewServer(t).NewRepo(t, "platform/apps")
	c1 := repo.Commit(t, "init", configMap("1"))
	repo.Tag(t, "v1.0.0", true)
	_, key := gittest.SigningKey(t, "Flux")
	_, err := env.Kube.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "keys"}, StringData: map[string]string{"flux.asc": key},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	main := map[string]any{"branch": "main"}
	sc := fluxtest.StartSourceControllerIn(t, env.Config, ns)
	create := func(name, url string, ref, more map[string]any) { gitRepository(t, ns, name, url, ref, more) }
	create("nobranch", repo.URL(), map[string]any{"branch": "missing"}, nil)
	create("badurl", "https://git.example.com/%zz", main, nil)
	create("nosecret", repo.URL(), main, map[string]any{"secretRef": map[string]any{"name": "missing"}})
	create("tagmode", repo.URL(), main, map[string]any{"verify": map[string]any{"mode": "Tag", "secretRef": map[string]any{"name": "keys"}}})
	create("semver", repo.URL(), map[string]any{"semver": "not a range"}, nil)
	create("noinclude", repo.URL(), main, map[string]any{"include": []any{map[string]any{"repository": map[string]any{"name": "gone"}}}})
	names := []string{"nobranch", "badurl", "nosecret", "tagmode", "noinclude"}
	theirs := conditionsOf(t, ns, append(names, "semver")...)
	sc.Stop()
	for _, name := range append(names, "semver") {
		clearStatus(t, ns, name)
	}

	s := serve(t, ns, fluxartifact.Config{})
	ours := conditionsOf(t, ns, append(names, "semver")...)
	for _, name := range names {
		assert.Equal(t, theirs[name], ours[name], name)
	}
	assert.Equal(t, "True URLInvalid", ours["badurl"]["Stalled"])
	assert.Equal(t, "True InvalidVerificationMode", ours["tagmode"]["Stalled"])
	assert.NotContains(t, ours["nobranch"], "Stalled", "retried: the branch may come")
	assert.Equal(t, "True ProgressingWithRetry", ours["nosecret"]["Reconciling"], "retried: the Secret may come")
	assert.Equal(t, "True NotFound", ours["noinclude"]["IncludeUnavailable"], "retried: the GitRepository may come")

	assert.Equal(t, "False GitOperationFailed", theirs["semver"]["Ready"])
	assert.NotContains(t, theirs["semver"], "Stalled", "source-controller tries it again")
	assert.Equal(t, map[string]string{"Ready": "False GitOperationFailed", "FetchFailed": "True GitOperationFailed",
		"Stalled": "True GitOperationFailed", "observedGeneration": "current"}, ours["semver"])
	patch := []byte(`{"spec":{"ref":{"semver":">=1.0.0"}}}`)
	_, err = env.Dynamic.Resource(gitRepos).Namespace(ns).Patch(context.Background(), "semver", types.MergePatchType, patch, metav1.PatchOptions{})
	require.NoError(t, err)
	u := artifactOf(t, ns, "semver", "v1.0.0@sha1:"+c1, s.url)
	assert.Nil(t, conditionOf(u, "Stalled"), "served: no longer stalled")
	assert.Equal(t, "True", conditionOf(u, "Ready")["status"])
}

// readyOf waits until the GitRepository's Ready condition has status,
// and returns the object.
func readyOf(t *testing.T, ns, name, status string) *unstructured.Unstructured {
	t.Helper()
	return waitFor(t, ns, name, "Ready "+status, func(u *unstructured.Unstructured) bool { return conditionOf(u, "Ready")["status"] == status })
}

// A GitRepository whose repository fails and then comes back at the
// commit it was served at is Ready again, its artifact kept, though no
// new commit is delivered: after a failed fetch, after a refusal that
// cleared (its Secret deleted and made again), and after a restart of
// the program, which remembers nothing of the failure it wrote.
func TestARecoveredGitRepositoryIsReadyAgain(t *testing.T) {
	ns := env.Namespace(t)
	git := gittest.NewTLSServer(t)
	repo := git.NewRepo(t, "platform/apps")
	c1 := repo.Commit(t, "init", configMap("1"))
	secret := func() {
		_, err := env.Kube.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "creds"}, StringData: map[string]string{"ca.crt": string(git.CACert())},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	secret()
	gitRepository(t, ns, "apps", repo.URL(), map[string]any{"branch": "main"}, map[string]any{"secretRef": map[string]any{"name": "creds"}})
	s := serve(t, ns, fluxartifact.Config{})
	served := artifactOf(t, ns, "apps", "main@sha1:"+c1, s.url)

	git.Deny("platform/apps.git", 503)
	s.w.Trigger(repo.URL())
	readyOf(t, ns, "apps", "False")
	git.Deny("platform/apps.git", 0)
	s.w.Trigger(repo.URL())
	u := readyOf(t, ns, "apps", "True")
	assert.Equal(t, field(served, "status", "artifact"), field(u, "status", "artifact"), "the same artifact")
	assert.Nil(t, conditionOf(u, "FetchFailed"))
	assert.Nil(t, conditionOf(u, "Reconciling"))

	require.NoError(t, env.Kube.CoreV1().Secrets(ns).Delete(context.Background(), "creds", metav1.DeleteOptions{}))
	u = readyOf(t, ns, "apps", "False")
	assert.Equal(t, "AuthenticationFailed", conditionOf(u, "Ready")["reason"])
	secret()
	u = readyOf(t, ns, "apps", "True")
	assert.Equal(t, field(served, "status", "artifact"), field(u, "status", "artifact"))

	git.Deny("platform/apps.git", 503)
	s.w.Trigger(repo.URL())
	readyOf(t, ns, "apps", "False")
	s.stop()
	git.Deny("platform/apps.git", 0)
	s.start(t, ns, fluxartifact.Config{}) // the same storage, cache and address: a new program
	readyOf(t, ns, "apps", "True")
}
