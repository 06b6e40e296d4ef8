package testenv_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/modwatch/modwatch/internal/dev/testenv"
	"github.com/modwatch/modwatch/internal/dev/upstream"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

var (
	gitSyncs  = schema.GroupVersionResource{Group: "numaplane.numaproj.io", Version: "v1alpha1", Resource: "gitsyncs"}
	gitRepos  = schema.GroupVersionResource{Group: "source.toolkit.fluxcd.io", Version: "v1", Resource: "gitrepositories"}
	receivers = schema.GroupVersionResource{Group: "notification.toolkit.fluxcd.io", Version: "v1", Resource: "receivers"}
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// namespace creates a namespace for one test and deletes it at the end, so
// that tests never see each other's objects, however often they run.
func namespace(t *testing.T) string {
	ns, err := env.Kube.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "test-"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = env.Kube.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

func obj(apiVersion, kind, ns, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": apiVersion, "kind": kind,
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     spec,
	}}
}

func TestGitSyncRoundTripAndStatus(t *testing.T) {
	ctx, ns := ctxT(t), namespace(t)
	gs := env.Dynamic.Resource(gitSyncs).Namespace(ns)
	created, err := gs.Create(ctx, obj("numaplane.numaproj.io/v1alpha1", "GitSync", ns, "app", map[string]any{
		"repoUrl": "https://git.example.com/platform/app.git", "path": "deploy", "targetRevision": "main",
		"helm":        map[string]any{"valueFiles": []any{"values.yaml"}, "parameters": []any{map[string]any{"name": "replicas", "value": "2"}}},
		"destination": map[string]any{"cluster": "staging-1", "namespace": "apps"},
	}), metav1.CreateOptions{})
	require.NoError(t, err)
	got, err := gs.Get(ctx, "app", metav1.GetOptions{})
	require.NoError(t, err)
	params, _, _ := unstructured.NestedSlice(got.Object, "spec", "helm", "parameters")
	assert.Equal(t, []any{map[string]any{"name": "replicas", "value": "2"}}, params)

	// Status goes through the status subresource only.
	require.NoError(t, unstructured.SetNestedMap(created.Object, map[string]any{
		"phase":        "Running",
		"commitStatus": map[string]any{"hash": strings.Repeat("a", 40), "synced": true, "syncTime": "2026-11-30T00:00:00Z"},
	}, "status"))
	_, err = gs.Update(ctx, created, metav1.UpdateOptions{})
	require.NoError(t, err)
	got, err = gs.Get(ctx, "app", metav1.GetOptions{})
	require.NoError(t, err)
	_, found, _ := unstructured.NestedMap(got.Object, "status")
	assert.False(t, found, "an update of the main resource drops status")
	got.Object["status"] = created.Object["status"]
	_, err = gs.UpdateStatus(ctx, got, metav1.UpdateOptions{})
	require.NoError(t, err)
	got, err = gs.Get(ctx, "app", metav1.GetOptions{})
	require.NoError(t, err)
	phase, _, _ := unstructured.NestedString(got.Object, "status", "phase")
	assert.Equal(t, "Running", phase)

	// The schema is the apiserver's to enforce.
	_, err = gs.Create(ctx, obj("numaplane.numaproj.io/v1alpha1", "GitSync", ns, "two-renderers", map[string]any{
		"repoUrl": "https://h/r", "targetRevision": "main", "raw": map[string]any{}, "kustomize": map[string]any{},
		"destination": map[string]any{"cluster": "c"},
	}), metav1.CreateOptions{})
	require.True(t, apierrors.IsInvalid(err), "raw and kustomize together: %v", err)
	bad := got.DeepCopy()
	require.NoError(t, unstructured.SetNestedField(bad.Object, "Exploded", "status", "phase"))
	_, err = gs.UpdateStatus(ctx, bad, metav1.UpdateOptions{})
	require.True(t, apierrors.IsInvalid(err), "unknown phase: %v", err)
}

func TestFluxObjects(t *testing.T) {
	ctx, ns := ctxT(t), namespace(t)
	repos := env.Dynamic.Resource(gitRepos).Namespace(ns)
	repo, err := repos.Create(ctx, obj("source.toolkit.fluxcd.io/v1", "GitRepository", ns, "podinfo", map[string]any{
		"url": "https://github.com/stefanprodan/podinfo", "interval": "5m",
		"ref": map[string]any{"branch": "master"}, "secretRef": map[string]any{"name": "creds"},
	}), metav1.CreateOptions{})
	require.NoError(t, err)
	timeout, _, _ := unstructured.NestedString(repo.Object, "spec", "timeout")
	assert.Equal(t, "60s", timeout, "defaulted by the schema")

	_, err = repos.Create(ctx, obj("source.toolkit.fluxcd.io/v1", "GitRepository", ns, "bad", map[string]any{
		"url": "ftp://example.com/r", "interval": "5m",
	}), metav1.CreateOptions{})
	require.True(t, apierrors.IsInvalid(err), "ftp URL: %v", err)

	recv, err := env.Dynamic.Resource(receivers).Namespace(ns).Create(ctx, obj("notification.toolkit.fluxcd.io/v1", "Receiver", ns, "podinfo", map[string]any{
		"type": "generic-hmac", "secretRef": map[string]any{"name": "token"},
		"resources": []any{map[string]any{"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository", "name": "podinfo"}},
	}), metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, unstructured.SetNestedField(recv.Object, "/hook/abc", "status", "webhookPath"))
	recv, err = env.Dynamic.Resource(receivers).Namespace(ns).UpdateStatus(ctx, recv, metav1.UpdateOptions{})
	require.NoError(t, err)
	path, _, _ := unstructured.NestedString(recv.Object, "status", "webhookPath")
	assert.Equal(t, "/hook/abc", path)

	// The mapper knows the CRDs.
	m, err := env.Mapper.RESTMapping(schema.GroupKind{Group: "source.toolkit.fluxcd.io", Kind: "GitRepository"}, "v1")
	require.NoError(t, err)
	assert.Equal(t, gitRepos, m.Resource)
}

func TestServerSideApply(t *testing.T) {
	ctx, ns := ctxT(t), namespace(t)
	cm := corev1ac.ConfigMap("ssa", ns).WithData(map[string]string{"k": "v"})
	got, err := env.Kube.CoreV1().ConfigMaps(ns).Apply(ctx, cm, metav1.ApplyOptions{FieldManager: "modwatch-test", Force: true})
	require.NoError(t, err)
	var managers []string
	for _, mf := range got.ManagedFields {
		if mf.Operation == metav1.ManagedFieldsOperationApply {
			managers = append(managers, mf.Manager)
		}
	}
	assert.Equal(t, []string{"modwatch-test"}, managers)

	// Applying the same object again writes nothing.
	again, err := env.Kube.CoreV1().ConfigMaps(ns).Apply(ctx, cm, metav1.ApplyOptions{FieldManager: "modwatch-test", Force: true})
	require.NoError(t, err)
	assert.Equal(t, got.ResourceVersion, again.ResourceVersion)
}

func TestMissingBinariesNameTheMakeTarget(t *testing.T) {
	t.Setenv("KUBEBUILDER_ASSETS", t.TempDir())
	_, err := testenv.AssetsDir()
	require.ErrorIs(t, err, testenv.ErrNoBinaries)
	assert.Contains(t, err.Error(), "make testbin")
	_, err = testenv.Start()
	require.ErrorIs(t, err, testenv.ErrNoBinaries)
}

func TestMakefileBuildsThisVersion(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "Makefile"))
	require.NoError(t, err)
	assert.Contains(t, string(data), "K8S_VERSION := "+testenv.KubernetesVersion)
	mod, err := os.ReadFile(filepath.Join("..", "testbin", "go.mod"))
	require.NoError(t, err)
	assert.Contains(t, string(mod), "k8s.io/kubernetes v"+testenv.KubernetesVersion)
}

// The GitSync fixture is Numaplane's CRD as its users install it: the same
// names, scope, versions, subresources and schema (descriptions aside), so
// that what the tests' apiserver accepts and refuses is what Numaplane's
// does. It is compared where Numaplane's CRD is (internal/dev/upstream).
func TestGitSyncFixtureIsFaithful(t *testing.T) {
	p := upstream.Require(t, "numaplane/config/crd/bases/numaplane.numaproj.io_gitsyncs.yaml")
	data, err := os.ReadFile(p)
	require.NoError(t, err)
	var original apiextensionsv1.CustomResourceDefinition
	require.NoError(t, yaml.Unmarshal(data, &original))
	crds, err := testenv.CRDs()
	require.NoError(t, err)
	var fixture *apiextensionsv1.CustomResourceDefinition
	for _, c := range crds {
		if c.Name == original.Name {
			fixture = c
		}
	}
	require.NotNil(t, fixture, "no fixture of %s", original.Name)
	for _, v := range append(original.Spec.Versions, fixture.Spec.Versions...) {
		stripDescriptions(v.Schema.OpenAPIV3Schema)
	}
	assert.Equal(t, original.Spec, fixture.Spec)
}

// stripDescriptions removes the descriptions of a schema, at every depth.
func stripDescriptions(s *apiextensionsv1.JSONSchemaProps) {
	if s == nil {
		return
	}
	s.Description = ""
	for k, p := range s.Properties {
		stripDescriptions(&p)
		s.Properties[k] = p
	}
	if s.Items != nil {
		stripDescriptions(s.Items.Schema)
		for i := range s.Items.JSONSchemas {
			stripDescriptions(&s.Items.JSONSchemas[i])
		}
	}
	if s.AdditionalProperties != nil {
		stripDescriptions(s.AdditionalProperties.Schema)
	}
}
