package helm_test

import (
	"context"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/modwatch/modwatch/sink/apply"
	"github.com/modwatch/modwatch/sink/apply/helm"
	"github.com/modwatch/modwatch/watcher/payload"
)

func f(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }

// Chart is a chart with a CRD, a vendored subchart, a hook and notes.
func Chart() fstest.MapFS {
	return fstest.MapFS{
		"Chart.yaml":  f("apiVersion: v2\nname: web\nversion: 0.1.0\ndependencies:\n- name: cache\n  version: 0.1.0\n"),
		"values.yaml": f("replicas: 1\ngreeting: hello\ncache:\n  size: small\n"),
		"prod.yaml":   f("replicas: 3\n"),
		"templates/cm.yaml": f(`apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-settings
  namespace: {{ .Release.Namespace }}
data:
  replicas: {{ .Values.replicas | quote }}
  greeting: {{ .Values.greeting | quote }}
`),
		"templates/hook.yaml":            f("apiVersion: v1\nkind: Pod\nmetadata:\n  name: test\n  annotations: {\"helm.sh/hook\": test}\nspec: {containers: [{name: t, image: busybox}]}\n"),
		"templates/NOTES.txt":            f("Thanks for installing {{ .Release.Name }}"),
		"templates/_helpers.tpl":         f(`{{ define "x" }}x{{ end }}`),
		"crds/widgets.yaml":              f("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: widgets.example.com\n"),
		"charts/cache/Chart.yaml":        f("apiVersion: v2\nname: cache\nversion: 0.1.0\n"),
		"charts/cache/templates/cm.yaml": f("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cache-{{ .Values.size }}\n"),
		"ci/skip.yaml":                   f("ignored: true"),
		".helmignore":                    f("ci/\n"),
	}
}

func byName(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	out := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		out[o.GetKind()+"/"+o.GetName()] = o
	}
	return out
}

func TestRenderChart(t *testing.T) {
	rs := payload.Render{Namespace: "apps", Helm: &payload.Helm{
		ReleaseName: "shop",
		ValueFiles:  []string{"prod.yaml"},
		Parameters: []payload.HelmParameter{
			{Name: "greeting", Value: `hi, there\`},
			{Name: "cache.size", Value: "large"},
		},
	}}
	objs, err := helm.New().Render(context.Background(), Chart(), rs)
	require.NoError(t, err)
	got := byName(objs)
	assert.Len(t, got, 3, "the CRD, the chart's ConfigMap and the subchart's: no hook, no notes")
	assert.Equal(t, "CustomResourceDefinition", objs[0].GetKind(), "CRDs come first")

	cm := got["ConfigMap/shop-settings"]
	require.NotNil(t, cm)
	assert.Equal(t, "apps", cm.GetNamespace(), "the release namespace is the destination")
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	assert.Equal(t, "3", data["replicas"], "value files override values.yaml")
	assert.Equal(t, `hi, there\`, data["greeting"], "a parameter's value is literal")
	assert.NotNil(t, got["ConfigMap/cache-large"], "parameters reach vendored subcharts")
}

func TestRenderErrors(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(fstest.MapFS)
		spec   payload.Helm
		err    string
	}{
		{name: "missing dependency", mutate: func(c fstest.MapFS) {
			delete(c, "charts/cache/Chart.yaml")
			delete(c, "charts/cache/templates/cm.yaml")
		}, err: "dependency cache is not vendored under charts/ and names no file:// repository"},
		{name: "dependency from a chart repository", mutate: func(c fstest.MapFS) {
			delete(c, "charts/cache/Chart.yaml")
			delete(c, "charts/cache/templates/cm.yaml")
			c["Chart.yaml"] = f("apiVersion: v2\nname: web\nversion: 0.1.0\ndependencies:\n- name: cache\n  version: 0.1.0\n  repository: https://charts.example.com\n")
		}, err: "needs a chart repository (\"https://charts.example.com\"): vendor it under charts/"},
		{name: "file dependency outside the tree", mutate: func(c fstest.MapFS) {
			delete(c, "charts/cache/Chart.yaml")
			delete(c, "charts/cache/templates/cm.yaml")
			c["Chart.yaml"] = f("apiVersion: v2\nname: web\nversion: 0.1.0\ndependencies:\n- name: cache\n  version: 0.1.0\n  repository: file://../cache\n")
		}, err: "only charts/ can be read here"},
		{name: "no chart", mutate: func(c fstest.MapFS) { delete(c, "Chart.yaml") }, err: "Chart.yaml"},
		{name: "bad template", mutate: func(c fstest.MapFS) { c["templates/bad.yaml"] = f("{{ .Values.nope.deeper }}") }, err: "bad.yaml"},
		{name: "template renders bad yaml", mutate: func(c fstest.MapFS) { c["templates/bad.yaml"] = f("kind: [\n") }, err: "bad.yaml"},
		{name: "missing value file", spec: payload.Helm{ValueFiles: []string{"nope.yaml"}}, err: `value file "nope.yaml"`},
		{name: "value file outside", spec: payload.Helm{ValueFiles: []string{"../../etc/passwd"}}, err: "not inside the chart"},
		{name: "bad parameter name", spec: payload.Helm{Parameters: []payload.HelmParameter{{Name: "a=b"}}}, err: "parameter name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Chart()
			if tt.mutate != nil {
				tt.mutate(c)
			}
			h := tt.spec
			h.ReleaseName = "shop"
			_, err := helm.New().Render(context.Background(), c, payload.Render{Namespace: "apps", Helm: &h})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.err)
		})
	}
}

// In the repository, a dependency named with file:// is read from where it
// says (inside the repository, never outside), and reported as read.
func TestFileDependenciesInTheRepository(t *testing.T) {
	repo := fstest.MapFS{
		"charts/web/Chart.yaml":           f("apiVersion: v2\nname: web\nversion: 0.1.0\ndependencies:\n- name: common\n  version: 0.1.0\n  repository: file://../../libs/common\n"),
		"charts/web/templates/cm.yaml":    f("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\n"),
		"libs/common/Chart.yaml":          f("apiVersion: v2\nname: common\nversion: 0.1.0\n"),
		"libs/common/templates/cm.yaml":   f("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: common-{{ .Release.Name }}\n"),
		"libs/other/templates/never.yaml": f("not read"),
	}
	objs, reads, err := helm.New().RenderRepo(context.Background(), repo, "charts/web", payload.Render{Helm: &payload.Helm{ReleaseName: "shop"}})
	require.NoError(t, err)
	got := byName(objs)
	assert.NotNil(t, got["ConfigMap/web"])
	assert.NotNil(t, got["ConfigMap/common-shop"], "the file:// dependency is rendered")
	assert.Equal(t, []string{"libs/common"}, reads)

	repo["charts/web/Chart.yaml"] = f("apiVersion: v2\nname: web\nversion: 0.1.0\ndependencies:\n- name: common\n  version: 0.1.0\n  repository: file://../../../etc\n")
	_, _, err = helm.New().RenderRepo(context.Background(), repo, "charts/web", payload.Render{})
	assert.ErrorContains(t, err, "outside the repository")
	repo["charts/web/Chart.yaml"] = f("apiVersion: v2\nname: web\nversion: 0.1.0\ndependencies:\n- name: common\n  version: 0.1.0\n  repository: file://../nowhere\n")
	_, _, err = helm.New().RenderRepo(context.Background(), repo, "charts/web", payload.Render{})
	assert.ErrorContains(t, err, "not in the repository")
}

// The chart's crds/ follow the policy: applied and kept up to date
// (CreateReplace, the default), created once (Create: marked for the
// sink), or left out (Skip); another policy is refused by name.
func TestCRDPolicies(t *testing.T) {
	crd := func(objs []*unstructured.Unstructured) *unstructured.Unstructured {
		return byName(objs)["CustomResourceDefinition/widgets.example.com"]
	}
	objs, err := helm.New().Render(context.Background(), Chart(), payload.Render{Helm: &payload.Helm{ReleaseName: "shop"}})
	require.NoError(t, err)
	require.NotNil(t, crd(objs))
	assert.NotContains(t, crd(objs).GetAnnotations(), apply.AnnotationCreateOnly)

	objs, err = helm.New(helm.WithCRDs(helm.CRDsCreate)).Render(context.Background(), Chart(), payload.Render{Helm: &payload.Helm{ReleaseName: "shop"}})
	require.NoError(t, err)
	assert.Equal(t, "true", crd(objs).GetAnnotations()[apply.AnnotationCreateOnly])

	objs, err = helm.New(helm.WithCRDs(helm.CRDsSkip)).Render(context.Background(), Chart(), payload.Render{Helm: &payload.Helm{ReleaseName: "shop"}})
	require.NoError(t, err)
	assert.Nil(t, crd(objs))
	assert.Len(t, objs, 2)

	_, err = helm.New(helm.WithCRDs("Sometimes")).Render(context.Background(), Chart(), payload.Render{})
	assert.ErrorContains(t, err, `CRD policy "Sometimes"`)
}
