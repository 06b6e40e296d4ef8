package configmap_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/internal/dev/upstream"
	"github.com/modwatch/modwatch/source/configmap"
	"github.com/modwatch/modwatch/watcher/payload"
)

const (
	embeddedSample  = "numaplane/config/samples/agent/config_map_embedded.yaml"
	referenceSample = "numaplane/config/samples/agent/config_map_reference.yaml"
)

// fixture reads config.yaml of the project's fixture in the form of one of
// Numaplane's agent ConfigMap samples.
func fixture(t *testing.T, rel string) []byte {
	t.Helper()
	data, err := upstream.FixtureConfig(rel)
	require.NoError(t, err)
	return data
}

// The embedded form yields its target, its placeholders filled.
func TestNumaplanesEmbeddedAgentForm(t *testing.T) {
	targets, err := configmap.Parse(fixture(t, embeddedSample), "configmap")
	require.NoError(t, err)
	require.Len(t, targets, 1)
	assert.Equal(t, "https://git.example.com/fixture/control.git", targets[0].URL)
	assert.Equal(t, "control", targets[0].Path)
	assert.Equal(t, "release", targets[0].Revision)
	r := targets[0].Payload.(payload.Render)
	assert.Equal(t, "fixture-east-1", r.Cluster)
	assert.Equal(t, []payload.HelmParameter{{Name: "clusterName", Value: "fixture-east-1"},
		{Name: "controllerHostName", Value: "ctl.east-1.fixture.example.com"}}, r.Helm.Parameters)
}

// The reference form reads its placeholders' values from the two files it
// names, in order, for its own cluster.
func TestNumaplanesReferenceAgentForm(t *testing.T) {
	data := fixture(t, referenceSample)
	_, err := configmap.Parse(data, "configmap")
	require.ErrorIs(t, err, configmap.ErrInvalid, "never a target with its placeholders unfilled")

	var asked configmap.Reference
	values := func(_ context.Context, ref configmap.Reference, cluster string) (map[string]string, error) {
		asked = ref
		assert.Equal(t, "fixture-east-1", cluster)
		return map[string]string{"clusterName": "fixture-east-1", "controllerHostName": "ctl.example.com"}, nil
	}
	l, err := configmap.Load(context.Background(), data, configmap.LoadOptions{Prefix: "configmap", Values: values})
	require.NoError(t, err)
	require.Len(t, asked.Files, 2)
	assert.Equal(t, configmap.FileRef{RepoURL: "https://git.example.com/fixture/values.git", TargetRevision: "stable", Path: "clusters/base.json"}, asked.Files[0])
	assert.Equal(t, "clusters/east.json", asked.Files[1].Path)
	require.Len(t, l.Targets, 1)
	assert.Equal(t, "ctl.example.com", l.Targets[0].Payload.(payload.Render).Helm.Parameters[1].Value)
}

// Numaplane's own agent samples, where they are, load as their fixtures do:
// the embedded one into one target with every placeholder filled from its
// own values; the reference one refused by Parse, and loaded through the
// two files it names.
func TestNumaplanesOwnAgentSamples(t *testing.T) {
	t.Run("embedded", func(t *testing.T) {
		upstream.Require(t, embeddedSample)
		data, err := upstream.ConfigFile(embeddedSample)
		require.NoError(t, err)
		targets, err := configmap.Parse(data, "configmap")
		require.NoError(t, err)
		require.Len(t, targets, 1)
		r := targets[0].Payload.(payload.Render)
		require.Len(t, r.Helm.Parameters, 2)
		for _, p := range r.Helm.Parameters {
			assert.NotContains(t, p.Value, "{{", p.Name)
		}
	})
	t.Run("reference", func(t *testing.T) {
		upstream.Require(t, referenceSample)
		data, err := upstream.ConfigFile(referenceSample)
		require.NoError(t, err)
		_, err = configmap.Parse(data, "configmap")
		require.ErrorIs(t, err, configmap.ErrInvalid)
		var asked configmap.Reference
		values := func(_ context.Context, ref configmap.Reference, cluster string) (map[string]string, error) {
			asked = ref
			return map[string]string{"clusterName": cluster, "controllerHostName": "h"}, nil
		}
		l, err := configmap.Load(context.Background(), data, configmap.LoadOptions{Prefix: "configmap", Values: values})
		require.NoError(t, err)
		assert.Len(t, asked.Files, 2)
		assert.Len(t, l.Targets, 1)
	})
}

// GitValues reads the files from their repositories: the agent's cluster's
// entry of each, a later file overriding an earlier one; a file without the
// cluster gives nothing, and one that is not there is an error naming it.
func TestGitValues(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "platform/values")
	repo.Commit(t, "values",
		gittest.File("default-clusters.json", `{"staging-1": {"host": "a.example.com", "tier": "default"}, "prod-1": {"host": "p"}}`),
		gittest.File("override-clusters.json", `{"staging-1": {"tier": "gold"}}`),
		gittest.File("other.json", `{"prod-1": {"host": "x"}}`))
	values := configmap.GitValues(t.TempDir(), nil, time.Minute)
	ref := configmap.Reference{Files: []configmap.FileRef{
		{RepoURL: repo.URL(), TargetRevision: "main", Path: "default-clusters.json"},
		{RepoURL: repo.URL(), TargetRevision: "main", Path: "override-clusters.json"},
		{RepoURL: repo.URL(), Path: "other.json"},
	}}
	got, err := values(context.Background(), ref, "staging-1")
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"host": "a.example.com", "tier": "gold"}, got)

	repo.Commit(t, "moved", gittest.File("override-clusters.json", `{"staging-1": {"tier": "silver"}}`))
	got, err = values(context.Background(), ref, "staging-1")
	require.NoError(t, err)
	assert.Equal(t, "silver", got["tier"], "read as the revision is now")

	ref.Files = append(ref.Files, configmap.FileRef{RepoURL: repo.URL(), Path: "nope.json"})
	_, err = values(context.Background(), ref, "staging-1")
	require.Error(t, err)
	assert.ErrorContains(t, err, "files[3] (nope.json")
}
