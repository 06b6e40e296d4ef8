package flux

import (
	"errors"
	"fmt"
	"maps"
	"testing"

	"strings"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/modwatch/modwatch/watcher/payload"
)

func gitRepo(name string, include []any, artifact map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"interval": "1m"}}}
	u.SetNamespace("ns")
	u.SetName(name)
	if include != nil {
		u.Object["spec"].(map[string]any)["include"] = include
	}
	if artifact != nil {
		u.Object["status"] = map[string]any{"artifact": artifact}
	}
	return u
}

func inc(name string, kv ...string) any {
	m := map[string]any{"repository": map[string]any{"name": name}}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// spec.include is read with the artifacts of the GitRepositories it names,
// as they are; what cannot be served is said with Flux's reasons.
func TestIncludes(t *testing.T) {
	art := map[string]any{"path": "gitrepository/ns/base/abc.tar.gz", "url": "http://x/gitrepository/ns/base/abc.tar.gz",
		"revision": "main@sha1:abc", "digest": "sha256:def", "lastUpdateTime": "2026-12-06T00:00:00Z", "size": int64(42)}
	objs := map[string]*unstructured.Unstructured{}
	add := func(u *unstructured.Unstructured) *unstructured.Unstructured { objs["ns/"+u.GetName()] = u; return u }
	add(gitRepo("base", nil, art))
	add(gitRepo("new", nil, nil))
	add(gitRepo("a", []any{inc("b")}, art))
	add(gitRepo("b", []any{inc("c")}, art))
	add(gitRepo("c", []any{inc("a")}, art))
	add(gitRepo("d", []any{inc("c")}, art)) // leads into a cycle it is not on

	includes := func(u *unstructured.Unstructured, objs map[string]*unstructured.Unstructured) ([]payload.GitRepositoryInclude, error) {
		all := maps.Clone(objs)
		all["ns/"+u.GetName()] = u // as the set has it
		return includes(u, all, includeCycles(all))
	}
	got, err := includes(add(gitRepo("app", []any{inc("base", "fromPath", "deploy", "toPath", "vendor/base"), inc("base")}, nil)), objs)
	require.NoError(t, err)
	want := payload.Artifact{Path: art["path"].(string), URL: art["url"].(string), Revision: "main@sha1:abc", Digest: "sha256:def",
		LastUpdateTime: "2026-12-06T00:00:00Z", Size: 42}
	assert.Equal(t, []payload.GitRepositoryInclude{
		{Name: "base", FromPath: "deploy", ToPath: "vendor/base", Artifact: want},
		{Name: "base", Artifact: want},
	}, got)
	assert.Equal(t, "base", got[1].At(), "toPath defaults to the name")

	none, err := includes(add(gitRepo("plain", nil, nil)), objs)
	assert.NoError(t, err)
	assert.Nil(t, none)
	_, err = includes(gitRepo("d", []any{inc("c")}, art), objs)
	assert.NoError(t, err, "a cycle d is not on is not d's")

	many := make([]any, maxIncludes+1)
	for i := range many {
		many[i] = inc("base")
	}
	for _, tc := range []struct {
		u       *unstructured.Unstructured
		reason  string
		stalled bool
		msg     string
	}{
		{gitRepo("x", []any{inc("gone")}, nil), ReasonIncludeNotFound, false, "could not get resource for include 'gone'"},
		{gitRepo("x", []any{inc("new")}, nil), ReasonIncludeNoArtifact, false, "no artifact available for include 'new'"},
		{gitRepo("a", []any{inc("b")}, nil), reasonUnsupported, true, "a cycle: a includes b includes c includes a"},
		{gitRepo("self", []any{inc("self")}, nil), reasonUnsupported, true, "a cycle: self includes self"},
		{gitRepo("x", []any{inc("")}, nil), reasonUnsupported, true, "spec.include[0].repository.name is empty"},
		{gitRepo("x", []any{inc("base", "copyOperations", "x")}, nil), reasonUnsupported, true, "spec.include[0].copyOperations is not served"},
		{gitRepo("x", []any{map[string]any{"repository": map[string]any{"name": "base", "namespace": "other"}}}, nil), reasonUnsupported, true, "spec.include[0].repository.namespace is not served"},
		{gitRepo("x", []any{"base"}, nil), reasonUnsupported, true, "spec.include[0] is not an object"},
		{gitRepo("x", many, nil), reasonUnsupported, true, "at most 32"},
		{gitRepo("x", []any{inc("base", "toPath", strings.Repeat("a/", 64)+"a")}, nil), reasonUnsupported, true, "toPath is longer than"},
		{gitRepo("x", []any{inc("base", "fromPath", strings.Repeat("a", 1025))}, nil), reasonUnsupported, true, "fromPath is longer than"},
	} {
		_, err := includes(tc.u, objs)
		var ge *payload.GitRepositoryError
		require.True(t, errors.As(err, &ge), "%s: %v", tc.msg, err)
		assert.Equal(t, tc.reason, ge.Reason, tc.msg)
		assert.Equal(t, tc.stalled, ge.Stalled, tc.msg)
		assert.ErrorContains(t, err, tc.msg)
	}
	withSubmodules := gitRepo("x", []any{inc("base")}, nil)
	withSubmodules.Object["spec"].(map[string]any)["recurseSubmodules"] = true
	_, err = includes(withSubmodules, objs)
	assert.ErrorContains(t, err, "spec.include with spec.recurseSubmodules is not served")
}

// A new artifact of a GitRepository another includes is a new set; of
// one none includes, or the same artifact written again, is not.
func TestANewArtifactIncludedIsNews(t *testing.T) {
	s := &Source{}
	keys := map[string]bool{}
	includedBy(gitRepo("app", []any{inc("base")}, nil), keys)
	s.included.set(keys)
	art := func(d string) map[string]any { return map[string]any{"digest": d, "revision": "main@sha1:" + d} }
	assert.True(t, s.newArtifactIncluded(gitRepo("base", nil, art("1")), gitRepo("base", nil, art("2"))))
	assert.True(t, s.newArtifactIncluded(gitRepo("base", nil, nil), gitRepo("base", nil, art("2"))), "a first artifact")
	assert.False(t, s.newArtifactIncluded(gitRepo("base", nil, art("1")), gitRepo("base", nil, art("1"))))
	assert.False(t, s.newArtifactIncluded(gitRepo("other", nil, art("1")), gitRepo("other", nil, art("2"))))
}

// Cycles are found in one pass over a set: a chain of thousands of
// includes, and a cycle of thousands, each GitRepository on the cycle
// refused with the way round, and those leading into it not.
func TestIncludeCyclesOfALargeSet(t *testing.T) {
	const n = 3000
	objs := map[string]*unstructured.Unstructured{}
	name := func(kind string, i int) string { return fmt.Sprintf("%s%d", kind, i) }
	for i := range n {
		var chain, ring []any
		if i+1 < n {
			chain = []any{inc(name("chain", i+1))}
		}
		ring = []any{inc(name("ring", (i+1)%n))}
		objs["ns/"+name("chain", i)] = gitRepo(name("chain", i), chain, map[string]any{"path": "p"})
		objs["ns/"+name("ring", i)] = gitRepo(name("ring", i), ring, map[string]any{"path": "p"})
	}
	objs["ns/into"] = gitRepo("into", []any{inc("ring0")}, map[string]any{"path": "p"})
	cycles := includeCycles(objs)
	assert.Len(t, cycles, n, "the ring's, only")
	for k, u := range objs {
		_, err := includes(u, objs, cycles)
		if strings.HasPrefix(k, "ns/ring") {
			require.ErrorContains(t, err, "a cycle: "+u.GetName()+" is one of 3000 GitRepositories that include each other")
			continue
		}
		require.NoError(t, err, k)
	}
	way := cyclePath("ns/ring7", objs, cycles)
	require.Len(t, way, n+1)
	assert.Equal(t, []string{"ring7", "ring8"}, way[:2])
	assert.Equal(t, "ring7", way[n])
}

// An included GitRepository's new artifact, seen while a set was being
// made from a listing before it, and before it was known to be included,
// makes another set: nothing else would hand it.
func TestANewArtifactSeenWhileASetIsMadeMakesAnother(t *testing.T) {
	s := New(nil, nil, Config{Artifacts: true})
	oldA := gitRepo("base", nil, map[string]any{"digest": "1", "revision": "r1"})
	newA := gitRepo("base", nil, map[string]any{"digest": "2", "revision": "r2"})
	b := gitRepo("app", []any{inc("base")}, nil)
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	require.NoError(t, store.Add(oldA))
	require.NoError(t, store.Add(b))
	s.store = store
	list := store.List()
	require.NoError(t, store.Update(newA))
	s.changed(oldA, newA) // not known to be included yet: no poke
	select {
	case <-s.dirty:
		t.Fatal("poked before the set was made")
	default:
	}
	byKey, cycles := s.includeIndex(list)
	incl, err := includes(b, byKey, cycles)
	require.NoError(t, err)
	assert.Equal(t, "1", incl[0].Artifact.Digest, "this set holds the listed artifact")
	select {
	case <-s.dirty:
	default:
		t.Fatal("no other set: base's new artifact would wait for the next refresh")
	}
	s.includeIndex(store.List())
	select {
	case <-s.dirty:
		t.Fatal("caught up: no other set")
	default:
	}
}

// What spec.include holds that is not what the CRD says is refused by
// name, never read as unset.
func TestAnIncludeOfAnotherShapeIsRefused(t *testing.T) {
	objs := map[string]*unstructured.Unstructured{"ns/base": gitRepo("base", nil, map[string]any{"path": "p"})}
	for _, tc := range []struct {
		include any
		err     string
	}{
		{"base", "spec.include is not a list"},
		{int64(3), "spec.include is not a list"},
		{map[string]any{"repository": map[string]any{"name": "base"}}, "spec.include is not a list"},
		{[]any{map[string]any{"repository": "base"}}, "spec.include[0].repository is not an object"},
		{[]any{map[string]any{"repository": map[string]any{"name": int64(1)}}}, "spec.include[0]: name is not a string"},
		{[]any{map[string]any{"repository": map[string]any{"name": "base"}, "toPath": int64(5)}}, "spec.include[0]: toPath is not a string"},
		{[]any{map[string]any{"repository": map[string]any{"name": "base"}, "fromPath": true}}, "spec.include[0]: fromPath is not a string"},
	} {
		u := gitRepo("x", nil, nil)
		u.Object["spec"].(map[string]any)["include"] = tc.include
		all := maps.Clone(objs)
		all["ns/x"] = u
		_, err := includes(u, all, includeCycles(all))
		assert.ErrorContains(t, err, tc.err, "%v", tc.include)
	}
	odd := map[string]any{"digest": map[string]any{"x": "1"}}
	s := &Source{}
	s.included.set(map[string]bool{"ns/base": true})
	assert.NotPanics(t, func() { s.newArtifactIncluded(gitRepo("base", nil, odd), gitRepo("base", nil, odd)) })
}
