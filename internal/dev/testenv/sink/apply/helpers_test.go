package apply_test

import (
	"context"
	"crypto/sha1"
	"fmt"
	"io/fs"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/dev/testenv"
	"github.com/modwatch/modwatch/sink/apply"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

var (
	configMaps   = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	clusterRoles = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func newSink(t *testing.T, cfg apply.Config) *apply.Sink {
	t.Helper()
	s, err := apply.New(env.Config, cfg)
	require.NoError(t, err)
	return s
}

// change is what the watcher would hand the sink: target id at commit,
// with the tree files.
func change(id, commit string, rs payload.Render, files fstest.MapFS) watcher.Change {
	return watcher.Change{
		Target: watcher.Target{ID: id, URL: "https://git.example.com/r.git", Payload: rs},
		To:     named(commit), Reason: watcher.ReasonInitial, FS: fs.FS(files),
	}
}

func file(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }

func configMap(name, value string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\ndata:\n  value: %q\n", name, value)
}

func clusterRole(name string) string {
	return fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: %s
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get]
`, name)
}

// get returns the object, or nil when it does not exist.
func get(t *testing.T, gvr schema.GroupVersionResource, ns, name string) *unstructured.Unstructured {
	t.Helper()
	var (
		u   *unstructured.Unstructured
		err error
	)
	if ns == "" {
		u, err = env.Dynamic.Resource(gvr).Get(context.Background(), name, metav1.GetOptions{})
	} else {
		u, err = env.Dynamic.Resource(gvr).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	}
	if apierrors.IsNotFound(err) {
		return nil
	}
	require.NoError(t, err)
	return u
}

func cmValue(t *testing.T, ns, name string) string {
	t.Helper()
	u := get(t, configMaps, ns, name)
	require.NotNil(t, u, "configmap %s/%s", ns, name)
	v, _, _ := unstructured.NestedString(u.Object, "data", "value")
	return v
}

// actions maps each entry of res to its action, by object.
func actions(res *apply.Result) map[string]apply.Action {
	out := map[string]apply.Action{}
	for _, e := range res.Entries {
		out[e.Object.String()] = e.Action
	}
	return out
}

func applyOK(t *testing.T, s *apply.Sink, c watcher.Change) *apply.Result {
	t.Helper()
	res, err := s.Apply(ctxT(t), c)
	require.NoError(t, err)
	for _, e := range res.Entries {
		assert.NoError(t, e.Err, e.Object.String())
	}
	return res
}

// named is a commit named name, for changes whose commits need only be
// told apart: name itself when it is 40 hexadecimal digits, a hash of it
// otherwise ("c1").
func named(name string) gitutil.Hash {
	if h, err := gitutil.ParseHash(name); err == nil {
		return h
	}
	return gitutil.Hash(sha1.Sum([]byte(name)))
}
