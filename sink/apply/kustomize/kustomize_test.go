package kustomize_test

import (
	"context"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/sink/apply/kustomize"
	"github.com/modwatch/modwatch/watcher/payload"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, gittest.LeakOptions...) }

func f(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }

const deployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: nginx:1.0}]
`

func TestOverlayOverBase(t *testing.T) {
	tree := fstest.MapFS{
		"base/kustomization.yaml": f("resources: [deployment.yaml]\n"),
		"base/deployment.yaml":    f(deployment),
		"kustomization.yaml":      f("namePrefix: prod-\nresources: [base]\nimages: [{name: nginx, newTag: \"2.0\"}]\nconfigMapGenerator: [{name: settings, files: [conf=settings.conf]}]\npatches: [{path: replicas.yaml}]\n"),
		"settings.conf":           f("debug=false\n"),
		"replicas.yaml":           f("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {replicas: 3}\n"),
		"README.md":               f("ignored"),
	}
	objs, err := kustomize.New().Render(context.Background(), tree, payload.Render{})
	require.NoError(t, err)
	names := map[string]string{}
	for _, o := range objs {
		names[o.GetKind()] = o.GetName()
	}
	assert.Equal(t, "prod-web", names["Deployment"])
	assert.Contains(t, names["ConfigMap"], "prod-settings-", "generated names carry the content hash")
	for _, o := range objs {
		if o.GetKind() == "Deployment" {
			assert.Equal(t, int64(3), o.Object["spec"].(map[string]any)["replicas"])
			assert.Contains(t, o.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["image"], "nginx:2.0")
		}
	}
}

func TestRefusesWhatIsNotInTheTree(t *testing.T) {
	tests := []struct {
		name, kustomization, err string
	}{
		{"remote base", "resources: ['github.com/org/repo//deploy?ref=v1']\n", "is remote"},
		{"https base", "resources: ['https://github.com/org/repo.git/deploy']\n", "is remote"},
		{"scp base", "resources: ['git@github.com:org/repo.git']\n", "is remote"},
		{"remote file", "resources: ['https://example.com/all.yaml']\n", "is remote"},
		{"remote patch", "patches: [{path: 'https://example.com/p.yaml'}]\n", "is remote"},
		{"remote generator file", "configMapGenerator: [{name: c, files: ['k=https://example.com/x']}]\n", "is remote"},
		{"parent directory", "resources: [../base]\n", "outside the target's path"},
		{"missing", "resources: [nowhere.yaml]\n", "not in the target's path"},
		{"helm charts", "helmCharts: [{name: x, repo: https://charts.example.com}]\n", "helm renderer"},
		{"not yaml", "resources: [\n", "kustomization.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := kustomize.New().Render(context.Background(), fstest.MapFS{"kustomization.yaml": f(tt.kustomization)}, payload.Render{})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.err)
		})
	}
}

func TestNoKustomization(t *testing.T) {
	_, err := kustomize.New().Render(context.Background(), fstest.MapFS{"a.yaml": f(deployment)}, payload.Render{})
	assert.ErrorContains(t, err, "kustomization")
}

// The standard base/overlays layout: an overlay whose base is elsewhere in
// the repository renders against the repository, confined to it, and says
// what it read outside its own path.
func TestOverlayWithABaseElsewhereInTheRepository(t *testing.T) {
	repo := fstest.MapFS{
		"base/kustomization.yaml":              f("resources: [deployment.yaml]\n"),
		"base/deployment.yaml":                 f(deployment),
		"components/labels/kustomization.yaml": f("apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\nlabels: [{pairs: {team: web}}]\n"),
		"overlays/prod/kustomization.yaml":     f("resources: [../../base]\ncomponents: [../../components/labels]\nnamePrefix: prod-\npatches: [{path: replicas.yaml}]\n"),
		"overlays/prod/replicas.yaml":          f("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 3\n"),
		"docs/README.md":                       f("x"),
	}
	objs, reads, err := kustomize.New().RenderRepo(context.Background(), repo, "overlays/prod", payload.Render{})
	require.NoError(t, err)
	require.Len(t, objs, 1)
	assert.Equal(t, "prod-web", objs[0].GetName())
	assert.Equal(t, "web", objs[0].GetLabels()["team"], "the component applied")
	assert.Equal(t, int64(3), objs[0].Object["spec"].(map[string]any)["replicas"])
	assert.ElementsMatch(t, []string{"base", "components/labels"}, reads, "what it read outside its path, and nothing else")

	for name, k := range map[string]string{
		"outside the repository": "resources: [../../../etc]\n",
		"absolute":               "resources: [/etc/passwd]\n",
		"missing":                "resources: [../../nowhere]\n",
		"remote":                 "resources: ['github.com/org/repo//deploy?ref=v1']\n",
	} {
		bad := fstest.MapFS{"overlays/prod/kustomization.yaml": f(k)}
		_, _, err := kustomize.New().RenderRepo(context.Background(), bad, "overlays/prod", payload.Render{})
		require.Error(t, err, name)
		assert.Regexp(t, "outside the repository|not in the repository|is remote", err.Error(), name)
	}
}
