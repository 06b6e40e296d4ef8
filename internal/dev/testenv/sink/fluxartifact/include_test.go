package fluxartifact_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/internal/dev/testenv/fluxtest"
	"github.com/modwatch/modwatch/sink/fluxartifact"
)

// includedAt waits until name's artifact is at revision, from prefix, with
// its includes' artifacts from prefix too, and returns the object.
func includedAt(t *testing.T, ns, name, revision, prefix string, includedRevision string) *unstructured.Unstructured {
	t.Helper()
	return waitFor(t, ns, name, "its artifact and its includes' from "+prefix, func(u *unstructured.Unstructured) bool {
		rev, _, _ := unstructured.NestedString(u.Object, "status", "artifact", "revision")
		url, _, _ := unstructured.NestedString(u.Object, "status", "artifact", "url")
		incs, _, _ := unstructured.NestedSlice(u.Object, "status", "includedArtifacts")
		if rev != revision || !strings.HasPrefix(url, prefix) || len(incs) == 0 {
			return false
		}
		for _, i := range incs {
			m := i.(map[string]any)
			if u, _ := m["url"].(string); !strings.HasPrefix(u, prefix) || m["revision"] != includedRevision {
				return false
			}
		}
		return true
	})
}

// A GitRepository's includes make the artifact source-controller makes:
// the same bytes, for a directory of another's artifact put at a path
// made for it, a whole artifact at the default path (its name), and a
// file put over a file; the included .sourceignore hides in its own
// folder, and the includer's spec.ignore everywhere. A push to the
// included repository makes a new artifact of the one including it, of
// the same bytes for one whose include it leaves unchanged.
func TestIncludesAreSourceControllers(t *testing.T) {
	sc := fluxtest.StartSourceController(t, env.Config)
	ns := env.Namespace(t)
	git := gittest.NewServer(t)
	base := git.NewRepo(t, "platform/base")
	b1 := base.Commit(t, "base",
		gittest.File("deploy/base.yaml", "kind: ConfigMap\n"),
		gittest.File("deploy/nested/n.yaml", "kind: Secret\n"),
		gittest.File("deploy/.sourceignore", "*.tmp\n"),
		gittest.File("deploy/x.tmp", "scratch"),
		executable("deploy/run.sh", "#!/bin/sh\n"),
		gittest.File("README.md", "# base\n"),
	)
	apps := git.NewRepo(t, "platform/apps")
	a1 := apps.Commit(t, "apps",
		gittest.File("deploy/app.yaml", "kind: ConfigMap\ndata: {}\n"),
		gittest.File("deploy/other.yaml", "kind: Service\n"),
		gittest.File("logo.png", "excluded"),
		gittest.File("docs/a.jpg", "kept: spec.ignore is set"),
	)
	main := map[string]any{"branch": "main"}
	gitRepository(t, ns, "base", base.URL(), main, nil)
	// spec.ignore set: with it, Flux's default exclusions are not
	// applied either way (without it, Flux drops them when a .sourceignore
	// is anywhere in the checkout, the included ones too, which this sink
	// does not: see the package's documentation).
	gitRepository(t, ns, "apps", apps.URL(), main, map[string]any{"ignore": "*.png\n", "include": []any{
		map[string]any{"repository": map[string]any{"name": "base"}, "fromPath": "deploy", "toPath": "vendor/base"},
		map[string]any{"repository": map[string]any{"name": "base"}},
		map[string]any{"repository": map[string]any{"name": "base"}, "fromPath": "deploy/base.yaml", "toPath": "deploy/app.yaml"},
	}})
	gitRepository(t, ns, "narrow", apps.URL(), main, map[string]any{"include": []any{
		map[string]any{"repository": map[string]any{"name": "base"}, "fromPath": "deploy/nested", "toPath": "deploy/nested"},
	}})
	theirs := includedAt(t, ns, "apps", "main@sha1:"+a1, "http://", "main@sha1:"+b1)
	theirNarrow := includedAt(t, ns, "narrow", "main@sha1:"+a1, "http://", "main@sha1:"+b1)
	theirBase := artifactOf(t, ns, "base", "main@sha1:"+b1, "http://")
	sc.Stop()

	s := serve(t, ns, fluxartifact.Config{})
	ours := includedAt(t, ns, "apps", "main@sha1:"+a1, s.url, "main@sha1:"+b1)
	for _, f := range []string{"path", "revision", "digest", "size"} {
		assert.Equal(t, field(theirs, "status", "artifact", f), field(ours, "status", "artifact", f), f)
	}
	incs, _, _ := unstructured.NestedSlice(ours.Object, "status", "includedArtifacts")
	theirIncs, _, _ := unstructured.NestedSlice(theirs.Object, "status", "includedArtifacts")
	require.Len(t, incs, 3)
	require.Len(t, theirIncs, 3)
	for i := range incs {
		assert.Equal(t, field(theirBase, "status", "artifact", "digest"), incs[i].(map[string]any)["digest"])
		for _, f := range []string{"path", "revision", "digest", "size"} {
			assert.Equal(t, theirIncs[i].(map[string]any)[f], incs[i].(map[string]any)[f], "includedArtifacts[%d].%s", i, f)
		}
	}
	assert.Equal(t, field(theirs, "status", "observedInclude"), field(ours, "status", "observedInclude"))
	assert.Equal(t, "True", conditionOf(ours, "Ready")["status"])
	narrow := includedAt(t, ns, "narrow", "main@sha1:"+a1, s.url, "main@sha1:"+b1)
	assert.Equal(t, field(theirNarrow, "status", "artifact", "digest"), field(narrow, "status", "artifact", "digest"))

	// A push to what is included: a new artifact of what includes it.
	b2 := base.Commit(t, "more", gittest.File("deploy/base.yaml", "kind: ConfigMap\ndata: {b: \"2\"}\n"))
	s.w.Trigger(base.URL())
	again := includedAt(t, ns, "apps", "main@sha1:"+a1, s.url, "main@sha1:"+b2)
	assert.NotEqual(t, field(ours, "status", "artifact", "digest"), field(again, "status", "artifact", "digest"))
	// What narrow includes did not change: its artifact, made again, is
	// the same bytes.
	narrowAgain := includedAt(t, ns, "narrow", "main@sha1:"+a1, s.url, "main@sha1:"+b2)
	assert.Equal(t, field(narrow, "status", "artifact", "digest"), field(narrowAgain, "status", "artifact", "digest"))
}
