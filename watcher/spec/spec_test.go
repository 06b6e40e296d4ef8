package spec_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/spec"
)

func TestGitSyncTarget(t *testing.T) {
	ok := spec.GitSync{RepoURL: "https://h/r.git", Path: "a", TargetRevision: "main", Helm: &spec.Helm{ValueFiles: []string{"v.yaml"}}, Destination: spec.Destination{Cluster: "c", Namespace: "n"}}
	tg, err := ok.Target("gitsync/ns/name", 0)
	require.NoError(t, err)
	assert.Equal(t, spec.Render{Renderer: spec.RendererHelm, Namespace: "n", Cluster: "c", Helm: ok.Helm}, tg.Payload)

	tg, err = spec.GitSync{RepoURL: "https://h/r.git", Kustomize: &struct{}{}}.Target("x", 0)
	require.NoError(t, err)
	assert.Equal(t, spec.Render{Renderer: spec.RendererKustomize}, tg.Payload)

	for name, s := range map[string]spec.GitSync{
		"two renderers":    {RepoURL: "https://h/r.git", Raw: &struct{}{}, Kustomize: &struct{}{}},
		"bad scheme":       {RepoURL: "ftp://h/r.git"},
		"no URL":           {},
		"escaping path":    {RepoURL: "https://h/r.git", Path: "a/../../b"},
		"nameless param":   {RepoURL: "https://h/r.git", Helm: &spec.Helm{Parameters: []spec.HelmParameter{{Value: "x"}}}},
		"invalid revision": {RepoURL: "https://h/r.git", TargetRevision: "a..b"},
	} {
		_, err := s.Target("gitsync/ns/name", 0)
		assert.ErrorIs(t, err, spec.ErrInvalid, name)
	}
}

// The JSON forms are Numaplane's: a GitSync's spec and the agent's
// configuration decode into GitSync unchanged.
func TestGitSyncJSON(t *testing.T) {
	var s spec.GitSync
	require.NoError(t, json.Unmarshal([]byte(`{"repoUrl":"https://h/r.git","path":"p","targetRevision":"v1",
		"helm":{"valueFiles":["a.yaml"],"parameters":[{"name":"k","value":"v"}]},
		"destination":{"cluster":"c","namespace":"n"}}`), &s))
	assert.Equal(t, spec.GitSync{RepoURL: "https://h/r.git", Path: "p", TargetRevision: "v1",
		Helm:        &spec.Helm{ValueFiles: []string{"a.yaml"}, Parameters: []spec.HelmParameter{{Name: "k", Value: "v"}}},
		Destination: spec.Destination{Cluster: "c", Namespace: "n"}}, s)
}

func TestRenderDefault(t *testing.T) {
	var r spec.Render
	r.Default()
	assert.Equal(t, spec.Render{Renderer: spec.RendererRaw, Namespace: spec.DefaultNamespace}, r)
}

func TestGitRepositoryValidate(t *testing.T) {
	g := spec.GitRepository{APIVersion: "source.toolkit.fluxcd.io/v1", Namespace: "ns", Name: "n", UID: "u"}
	require.NoError(t, g.Validate())
	assert.Equal(t, "ns/n", g.Key())
	for _, bad := range []spec.GitRepository{{}, {Namespace: "ns", Name: "n", UID: "u"}, {APIVersion: "v", Name: "n", UID: "u"}, {APIVersion: "v", Namespace: "ns", UID: "u"}, {APIVersion: "v", Namespace: "ns", Name: "n"}} {
		assert.ErrorIs(t, bad.Validate(), spec.ErrInvalid, "%+v", bad)
	}
}

func TestOf(t *testing.T) {
	r := spec.Render{Renderer: "helm"}
	got, ok := spec.Of[spec.Render](watcher.Target{Payload: r})
	assert.True(t, ok)
	assert.Equal(t, r, got)
	got, ok = spec.Of[spec.Render](watcher.Target{Payload: &r})
	assert.True(t, ok)
	assert.Equal(t, r, got)
	for _, p := range []any{nil, (*spec.Render)(nil), map[string]any{"renderer": "helm"}, spec.GitRepository{}} {
		_, ok := spec.Of[spec.Render](watcher.Target{Payload: p})
		assert.False(t, ok, "%#v", p)
	}
}
