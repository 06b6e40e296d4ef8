// Package testenv starts a real Kubernetes control plane (kube-apiserver and
// etcd, through controller-runtime's envtest) for the tests of one package,
// with the project's CRDs installed.
//
// The binaries are built from Go modules by `make testbin` into
// .cache/testbin/k8s-<KubernetesVersion> at the repository root; testenv
// finds them there by itself, or in $KUBEBUILDER_ASSETS when set. When they
// are missing, Start fails with a message naming the make target: tests
// never skip silently.
//
// The tests that need a control plane live in this module, not in the
// published modules they test: internal/dev/testenv/source/gitsync holds the
// envtest suite of source/gitsync, and so on for source/flux, sink/apply,
// sink/apply/helm, sink/fluxreceiver and watcher/cluster. A published
// module never requires this one (it cannot be resolved from outside the
// tree), so a consumer's module graph stays free of it and of envtest.
// internal/dev/release checks that (TestPublishedModulesResolveOutsideTheTree).
//
// Use it from TestMain:
//
//	var env *testenv.Env
//
//	func TestMain(m *testing.M) { testenv.Main(m, &env) }
package testenv

import (
	"bufio"
	"bytes"
	"context"
	"embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// KubernetesVersion is the version of kube-apiserver the Makefile builds.
const KubernetesVersion = "1.37.2"

//go:embed crds/*.yaml
var crdFiles embed.FS

// Env is a running control plane.
type Env struct {
	// Config reaches the apiserver as an administrator.
	Config *rest.Config
	// Kube is a typed clientset, Dynamic a dynamic client.
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
	// Mapper maps kinds to resources; call Reset after installing CRDs.
	Mapper meta.ResettableRESTMapper

	env *envtest.Environment
}

// TestbinRoot is where `make testbin` keeps the binaries it builds, one
// folder a version, outside any clone (as setup-envtest keeps envtest's),
// so that every checkout and every CI run of a machine shares them:
// $MODWATCH_TESTBIN, else modwatch/testbin in $XDG_CACHE_HOME or
// $HOME/.cache (the Makefile's TESTBIN_ROOT, computed the same way).
func TestbinRoot() (string, error) {
	if dir := os.Getenv("MODWATCH_TESTBIN"); dir != "" {
		return dir, nil
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home := os.Getenv("HOME")
		if home == "" {
			return "", errors.New("testenv: neither MODWATCH_TESTBIN, XDG_CACHE_HOME nor HOME is set: no place for the test control plane")
		}
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "modwatch", "testbin"), nil
}

// ErrNoBinaries is returned when kube-apiserver or etcd cannot be found.
var ErrNoBinaries = errors.New("testenv: control plane binaries not found; run `make testbin` (or `make test`) first")

// AssetsDir returns the directory holding kube-apiserver and etcd:
// $KUBEBUILDER_ASSETS when set, else k8s-<version> in TestbinRoot.
func AssetsDir() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		root, err := TestbinRoot()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, "k8s-"+KubernetesVersion)
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if fi, err := os.Stat(filepath.Join(dir, bin)); err != nil || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%w (looked for %s in %s)", ErrNoBinaries, bin, dir)
		}
	}
	return dir, nil
}

// CRDs returns the CustomResourceDefinitions shipped in crds/: GitSync,
// Flux's GitRepository and Receiver.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var out []*apiextensionsv1.CustomResourceDefinition
	err := fs.WalkDir(crdFiles, "crds", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := crdFiles.ReadFile(p)
		if err != nil {
			return err
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := yaml.UnmarshalStrict(doc, crd); err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			out = append(out, crd)
		}
	})
	return out, err
}

// Start starts kube-apiserver and etcd and installs the CRDs.
func Start() (*Env, error) {
	dir, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	crds, err := CRDs()
	if err != nil {
		return nil, err
	}
	te := &envtest.Environment{
		BinaryAssetsDirectory:    dir,
		CRDs:                     crds,
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}
	cfg, err := te.Start()
	if err != nil {
		return nil, fmt.Errorf("testenv: start control plane from %s: %w", dir, err)
	}
	e := &Env{Config: cfg, env: te}
	if e.Kube, err = kubernetes.NewForConfig(cfg); err == nil {
		e.Dynamic, err = dynamic.NewForConfig(cfg)
	}
	if err != nil {
		_ = te.Stop()
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		_ = te.Stop()
		return nil, err
	}
	e.Mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	return e, nil
}

// Stop stops the control plane and removes its data.
func (e *Env) Stop() error {
	if e == nil || e.env == nil {
		return nil
	}
	return e.env.Stop()
}

// Main starts a control plane into *env, runs the package's tests, stops it
// and exits. A control plane that cannot start fails the run with the
// reason (for instance ErrNoBinaries).
//
// Under `go test -fuzz`, no control plane starts (each fuzz worker would
// start its own): fuzz targets must not need one.
func Main(m *testing.M, env **Env) {
	flag.Parse()
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
		os.Exit(m.Run())
	}
	e, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, strings.TrimSpace(err.Error()))
		os.Exit(1)
	}
	*env = e
	code := m.Run()
	if err := e.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "testenv: stop:", err)
		code = max(code, 1)
	}
	if code == 0 {
		if err := goleak.Find(LeakOptions...); err != nil {
			fmt.Fprintln(os.Stderr, "testenv: goroutines outlived the tests:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// LeakOptions ignore the goroutines that are not the tests' own: idle
// keep-alive connections of shared HTTP transports and klog's flush daemon.
var LeakOptions = append(slices.Clone(gittest.LeakOptions),
	goleak.IgnoreAnyFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"))

// Namespace creates a namespace for one test and deletes it when the test
// ends, so that tests never see each other's objects however often they
// run. (The control plane runs no namespace controller: the namespace
// stays Terminating, its objects with it, until the control plane stops.)
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "test-"}}
	ns, err := e.Kube.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("testenv: create namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = e.Kube.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

// WaitFor watches the object gvr namespace/name until ok holds for it (u is
// nil while the object does not exist), or fails the test after a minute.
func (e *Env) WaitFor(t testing.TB, gvr schema.GroupVersionResource, namespace, name, what string, ok func(u *unstructured.Unstructured) bool) *unstructured.Unstructured {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := e.Dynamic.Resource(gvr).Namespace(namespace)
	for {
		list, err := client.List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
		if err != nil {
			t.Fatalf("testenv: waiting for %s: %v", what, err)
		}
		var cur *unstructured.Unstructured
		if len(list.Items) > 0 {
			cur = &list.Items[0]
		}
		if ok(cur) {
			return cur
		}
		w, err := client.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: list.GetResourceVersion()})
		if err != nil {
			t.Fatalf("testenv: waiting for %s: %v", what, err)
		}
		for ended := false; !ended; {
			select {
			case <-ctx.Done():
				w.Stop()
				t.Fatalf("testenv: timed out waiting for %s", what)
			case ev, open := <-w.ResultChan():
				if !open {
					ended = true // the watch ended: list again
					break
				}
				u, isObj := ev.Object.(*unstructured.Unstructured)
				if !isObj {
					continue
				}
				if ev.Type == watch.Deleted {
					u = nil
				}
				if ok(u) {
					w.Stop()
					return u
				}
			}
		}
		w.Stop()
	}
}

// ApplyKustomization renders the kustomization in dir, as `kubectl apply
// -k` would, creates every object it holds, and returns them.
func (e *Env) ApplyKustomization(t testing.TB, dir string) []*unstructured.Unstructured {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("testenv: kustomize %s: %v", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range res.Resources() {
		m, err := r.Map()
		if err != nil {
			t.Fatalf("testenv: kustomize %s: %v", dir, err)
		}
		u := &unstructured.Unstructured{Object: m}
		gvk := u.GroupVersionKind()
		mapping, err := e.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("testenv: %s %s: %v", gvk.Kind, u.GetName(), err)
		}
		if _, err := e.Dynamic.Resource(mapping.Resource).Namespace(u.GetNamespace()).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("testenv: create %s %s: %v", gvk.Kind, u.GetName(), err)
		}
		out = append(out, u)
	}
	return out
}

// ServiceAccountConfig reaches the apiserver as the ServiceAccount
// namespace/name, with the groups its token would give it, so that RBAC
// judges what a program running as it may do.
func (e *Env) ServiceAccountConfig(namespace, name string) *rest.Config {
	cfg := rest.CopyConfig(e.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + namespace + ":" + name,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
	}
	return cfg
}

// FreeAddr returns a loopback address ("127.0.0.1:port") no one listens on
// now, for a program under test that must be told where to listen.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
