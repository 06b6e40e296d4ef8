package apply_test

import (
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/sink/apply"
	"github.com/modwatch/modwatch/sink/apply/helm"
	"github.com/modwatch/modwatch/sink/apply/kustomize"
	"github.com/modwatch/modwatch/watcher/spec"
)

func TestKustomizeAndHelmTreesApplied(t *testing.T) {
	ns := env.Namespace(t)
	s := newSink(t, apply.Config{},
		apply.WithRenderer(kustomize.Name, kustomize.New()),
		apply.WithRenderer(helm.Name, helm.New()))

	k := fstest.MapFS{
		"kustomization.yaml": file("namePrefix: k-\nresources: [cm.yaml, role.yaml]\ncommonLabels: {tier: web}\n"),
		"cm.yaml":            file(configMap("settings", "1")),
		"role.yaml":          file(clusterRole("kustomized-" + ns)),
	}
	res := applyOK(t, s, change("kustomize/"+ns, "c1", spec.Render{Renderer: kustomize.Name, Namespace: ns}, k))
	assert.Equal(t, map[string]apply.Action{
		"ConfigMap/" + ns + "/k-settings":                          apply.Created,
		"ClusterRole.rbac.authorization.k8s.io/k-kustomized-" + ns: apply.Created,
	}, actions(res))
	cm := get(t, configMaps, ns, "k-settings")
	require.NotNil(t, cm)
	assert.Equal(t, "web", cm.GetLabels()["tier"])

	h := fstest.MapFS{
		"Chart.yaml":  file("apiVersion: v2\nname: web\nversion: 0.1.0\n"),
		"values.yaml": file("greeting: hello\n"),
		"templates/cm.yaml": file(`apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-greeting
data:
  value: {{ .Values.greeting | quote }}
`),
	}
	helmSpec := spec.Render{Renderer: helm.Name, Namespace: ns, Helm: &spec.Helm{
		Parameters: []spec.HelmParameter{{Name: "greeting", Value: "hi"}},
	}}
	res = applyOK(t, s, change("helm/"+ns+"/shop", "c1", helmSpec, h))
	assert.Equal(t, map[string]apply.Action{"ConfigMap/" + ns + "/shop-greeting": apply.Created}, actions(res),
		"the release is named after the target's last segment")
	assert.Equal(t, "hi", cmValue(t, ns, "shop-greeting"))

	_, err := s.Apply(ctxT(t), change("nope/"+ns, "c1", spec.Render{Renderer: "jsonnet"}, k))
	assert.ErrorIs(t, err, apply.ErrInvalidConfig, "an unregistered renderer is a configuration error")
}
