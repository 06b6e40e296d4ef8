package apply_test

import (
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/sink/apply"
	"github.com/modwatch/modwatch/sink/apply/kustomize"
	"github.com/modwatch/modwatch/watcher/payload"
)

func TestKustomizeTreeApplied(t *testing.T) {
	ns := env.Namespace(t)
	s := newSink(t, apply.Config{Renderers: map[string]apply.Renderer{kustomize.Name: kustomize.New()}})

	k := fstest.MapFS{
		"kustomization.yaml": file("namePrefix: k-\nresources: [cm.yaml, role.yaml]\ncommonLabels: {tier: web}\n"),
		"cm.yaml":            file(configMap("settings", "1")),
		"role.yaml":          file(clusterRole("kustomized-" + ns)),
	}
	res := applyOK(t, s, change("kustomize/"+ns, "c1", payload.Render{Renderer: kustomize.Name, Namespace: ns}, k))
	assert.Equal(t, map[string]apply.Action{
		"ConfigMap/" + ns + "/k-settings":                          apply.Created,
		"ClusterRole.rbac.authorization.k8s.io/k-kustomized-" + ns: apply.Created,
	}, actions(res))
	cm := get(t, configMaps, ns, "k-settings")
	require.NotNil(t, cm)
	assert.Equal(t, "web", cm.GetLabels()["tier"])

	_, err := s.Apply(ctxT(t), change("nope/"+ns, "c1", payload.Render{Renderer: "jsonnet"}, k))
	assert.ErrorIs(t, err, apply.ErrInvalidConfig, "an unregistered renderer is a configuration error")
}
