package helm_test

import (
	"context"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/dev/testenv"
	"github.com/modwatch/modwatch/sink/apply"
	"github.com/modwatch/modwatch/sink/apply/helm"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// A chart in a target's tree, rendered through the apply sink into a real
// apiserver: the release is named after the target's last segment and the
// target's parameters are set.
func TestChartAppliedThroughTheSink(t *testing.T) {
	ns := env.Namespace(t)
	s, err := apply.New(env.Config, apply.Config{InventoryNamespace: ns, Renderers: map[string]apply.Renderer{helm.Name: helm.New()}})
	require.NoError(t, err)
	chart := fstest.MapFS{
		"Chart.yaml":  {Data: []byte("apiVersion: v2\nname: web\nversion: 0.1.0\n")},
		"values.yaml": {Data: []byte("greeting: hello\n")},
		"templates/cm.yaml": {Data: []byte(`apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-greeting
data:
  value: {{ .Values.greeting | quote }}
`)},
	}
	render := payload.Render{Renderer: helm.Name, Namespace: ns, Helm: &payload.Helm{
		Parameters: []payload.HelmParameter{{Name: "greeting", Value: "hi"}},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := s.Apply(ctx, watcher.Change{
		Target: watcher.Target{ID: "helm/" + ns + "/shop", URL: "https://git.example.com/r.git", Payload: render},
		To:     gitutil.Hash{0xc1}, Reason: watcher.ReasonInitial, FS: chart,
	})
	require.NoError(t, err)
	require.Len(t, res.Entries, 1)
	assert.Equal(t, "ConfigMap/"+ns+"/shop-greeting", res.Entries[0].Object.String())
	assert.Equal(t, apply.Created, res.Entries[0].Action)
	cm, err := env.Kube.CoreV1().ConfigMaps(ns).Get(ctx, "shop-greeting", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "hi", cm.Data["value"])
	assert.Empty(t, render.Helm.ReleaseName, "the target's payload is not changed")
}
