package configmap_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/gittest"
	"github.com/modwatch/modwatch/internal/upstream"
	"github.com/modwatch/modwatch/source/configmap"
	"github.com/modwatch/modwatch/watcher/spec"
)

// sample reads config.yaml of one of Numaplane's agent ConfigMap samples.
func sample(t *testing.T, name string) []byte {
	t.Helper()
	data, err := upstream.ConfigFile("numaplane/config/samples/agent/" + name)
	require.NoError(t, err)
	return data
}

// Numaplane's embedded sample yields its target, its placeholders filled.
func TestNumaplanesEmbeddedAgentSample(t *testing.T) {
	targets, err := configmap.Parse(sample(t, "config_map_embedded.yaml"), "configmap")
	require.NoError(t, err)
	require.Len(t, targets, 1)
	assert.Equal(t, "https://github.com/mynumaplaneinstall.git", targets[0].URL)
	assert.Equal(t, "sample-pipeline", targets[0].Path)
	r := targets[0].Payload.(spec.Render)
	assert.Equal(t, "staging-usw2-k8s", r.Cluster)
	assert.Equal(t, []spec.HelmParameter{{Name: "clusterName", Value: "staging-usw2-k8s"},
		{Name: "controllerHostName", Value: "numaplane.stagingusw2k8s.mydomain.com"}}, r.Helm.Parameters)
}

// Numaplane's reference sample reads its placeholders' values from the two
// files it names, in order, for its own cluster.
func TestNumaplanesReferenceAgentSample(t *testing.T) {
	data := sample(t, "config_map_reference.yaml")
	_, err := configmap.Parse(data, "configmap")
	require.ErrorIs(t, err, configmap.ErrInvalid, "never a target with its placeholders unfilled")

	var asked configmap.Reference
	values := func(_ context.Context, ref configmap.Reference, cluster string) (map[string]string, error) {
		asked = ref
		assert.Equal(t, "staging-usw2-k8s", cluster)
		return map[string]string{"clusterName": "staging-usw2-k8s", "controllerHostName": "ctl.example.com"}, nil
	}
	l, err := configmap.Load(context.Background(), data, configmap.LoadOptions{Prefix: "configmap", Values: values})
	require.NoError(t, err)
	require.Len(t, asked.Files, 2)
	assert.Equal(t, configmap.FileRef{RepoURL: "https://github.com/myrepo.git", TargetRevision: "master", Path: "default-clusters.json"}, asked.Files[0])
	assert.Equal(t, "override-clusters.json", asked.Files[1].Path)
	require.Len(t, l.Targets, 1)
	assert.Equal(t, "ctl.example.com", l.Targets[0].Payload.(spec.Render).Helm.Parameters[1].Value)
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
