package payload_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
)

func TestGitSyncTarget(t *testing.T) {
	ok := payload.GitSync{RepoURL: "https://h/r.git", Path: "a", TargetRevision: "main", Helm: &payload.Helm{ValueFiles: []string{"v.yaml"}}, Destination: payload.Destination{Cluster: "c", Namespace: "n"}}
	tg, err := ok.Target("gitsync/ns/name", 0)
	require.NoError(t, err)
	assert.Equal(t, payload.Render{Renderer: payload.RendererHelm, Namespace: "n", Cluster: "c", Helm: ok.Helm}, tg.Payload)

	tg, err = payload.GitSync{RepoURL: "https://h/r.git", Kustomize: &struct{}{}}.Target("x", 0)
	require.NoError(t, err)
	assert.Equal(t, payload.Render{Renderer: payload.RendererKustomize}, tg.Payload)

	for name, s := range map[string]payload.GitSync{
		"two renderers":    {RepoURL: "https://h/r.git", Raw: &struct{}{}, Kustomize: &struct{}{}},
		"bad scheme":       {RepoURL: "ftp://h/r.git"},
		"no URL":           {},
		"escaping path":    {RepoURL: "https://h/r.git", Path: "a/../../b"},
		"nameless param":   {RepoURL: "https://h/r.git", Helm: &payload.Helm{Parameters: []payload.HelmParameter{{Value: "x"}}}},
		"invalid revision": {RepoURL: "https://h/r.git", TargetRevision: "a..b"},
	} {
		_, err := s.Target("gitsync/ns/name", 0)
		assert.ErrorIs(t, err, payload.ErrInvalid, name)
	}
}

// The JSON forms are Numaplane's: a GitSync's spec and the agent's
// configuration decode into GitSync unchanged.
func TestGitSyncJSON(t *testing.T) {
	var s payload.GitSync
	require.NoError(t, json.Unmarshal([]byte(`{"repoUrl":"https://h/r.git","path":"p","targetRevision":"v1",
		"helm":{"valueFiles":["a.yaml"],"parameters":[{"name":"k","value":"v"}]},
		"destination":{"cluster":"c","namespace":"n"}}`), &s))
	assert.Equal(t, payload.GitSync{RepoURL: "https://h/r.git", Path: "p", TargetRevision: "v1",
		Helm:        &payload.Helm{ValueFiles: []string{"a.yaml"}, Parameters: []payload.HelmParameter{{Name: "k", Value: "v"}}},
		Destination: payload.Destination{Cluster: "c", Namespace: "n"}}, s)
}

func TestRenderDefault(t *testing.T) {
	var r payload.Render
	r.Default()
	assert.Equal(t, payload.Render{Renderer: payload.RendererRaw, Namespace: payload.DefaultNamespace}, r)
}

func TestGitRepositoryValidate(t *testing.T) {
	g := payload.GitRepository{APIVersion: "source.toolkit.fluxcd.io/v1", Namespace: "ns", Name: "n", UID: "u"}
	require.NoError(t, g.Validate())
	assert.Equal(t, "ns/n", g.Key())
	for _, bad := range []payload.GitRepository{{}, {Namespace: "ns", Name: "n", UID: "u"}, {APIVersion: "v", Name: "n", UID: "u"}, {APIVersion: "v", Namespace: "ns", UID: "u"}, {APIVersion: "v", Namespace: "ns", Name: "n"}} {
		assert.ErrorIs(t, bad.Validate(), payload.ErrInvalid, "%+v", bad)
	}
}

func TestOf(t *testing.T) {
	r := payload.Render{Renderer: "helm"}
	got, ok := payload.Of[payload.Render](watcher.Target{Payload: r})
	assert.True(t, ok)
	assert.Equal(t, r, got)
	got, ok = payload.Of[payload.Render](watcher.Target{Payload: &r})
	assert.True(t, ok)
	assert.Equal(t, r, got)
	for _, p := range []any{nil, (*payload.Render)(nil), map[string]any{"renderer": "helm"}, payload.GitRepository{}} {
		_, ok := payload.Of[payload.Render](watcher.Target{Payload: p})
		assert.False(t, ok, "%#v", p)
	}
}
