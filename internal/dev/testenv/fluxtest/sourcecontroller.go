package fluxtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/modwatch/modwatch/internal/dev/testenv"
)

// SourceControllerVersion is the version of Flux's source-controller that
// `make testbin` builds from its Go module (internal/dev/testbin/sourcecontroller).
const SourceControllerVersion = "v1.9.0"

// ErrNoSourceController is returned when the source-controller binary
// cannot be found.
var ErrNoSourceController = errors.New("fluxtest: source-controller not found; run `make testbin` (or `make test`) first")

// SourceControllerDir returns the directory holding the source-controller
// binary and the CRDs it ships (crds/): source-controller-<version>, beside the control
// plane's binaries (testenv.TestbinRoot).
func SourceControllerDir() (string, error) {
	return controllerDir("source-controller", SourceControllerVersion, ErrNoSourceController)
}

// controllerDir is the directory <name>-<version> beside the control
// plane's binaries, holding the executable name; notFound when it does not.
func controllerDir(name, version string, notFound error) (string, error) {
	assets, err := testenv.AssetsDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(filepath.Dir(assets), name+"-"+version)
	if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%w (looked in %s)", notFound, dir)
	}
	return dir, nil
}

// SourceController is Flux's source-controller, running against a test
// control plane until the test ends (or Stop).
type SourceController = Controller

// Controller is one of Flux's controllers, a process of its own, running
// against a test control plane until the test ends (or Stop).
type Controller struct {
	name string
	mu   sync.Mutex
	log  bytes.Buffer
	stop func()
	pid  int
}

// PID is the controller's process.
func (s *Controller) PID() int { return s.pid }

// Stop stops the controller, and waits until it has exited: from then on
// nothing writes the GitRepositories but the test.
func (s *Controller) Stop() { s.stop() }

// Log is what the controller wrote so far.
func (s *Controller) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

func (s *Controller) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.Write(p)
}

// StartSourceController installs the CRDs source-controller ships (its
// GitRepository replaces the trimmed one of testenv) and runs it, watching
// every namespace, with cfg's identity. It is stopped when the test ends;
// its log is shown if the test failed.
func StartSourceController(t TB, cfg *rest.Config) *SourceController {
	t.Helper()
	return StartSourceControllerIn(t, cfg, "")
}

// StartSourceControllerIn is StartSourceController watching namespace
// only (its --watch-all-namespaces=false and RUNTIME_NAMESPACE), or every
// namespace when it is "".
func StartSourceControllerIn(t TB, cfg *rest.Config, namespace string) *SourceController {
	t.Helper()
	dir, err := SourceControllerDir()
	if err != nil {
		t.Fatalf("%v", err)
	}
	installCRDs(t, cfg, dir)
	tmp, health := scratch(t, cfg, "source-controller")
	storage, err := testenv.FreeAddr()
	if err != nil {
		t.Fatalf("%v", err)
	}
	if err := os.Mkdir(filepath.Join(tmp, "storage"), 0o700); err != nil {
		t.Fatalf("%v", err)
	}
	return start(t, &Controller{name: "source-controller"}, tmp, health, namespace, filepath.Join(dir, "source-controller"),
		"--storage-path="+filepath.Join(tmp, "storage"), "--storage-addr="+storage, "--storage-adv-addr="+storage,
		"--concurrent=4")
}

// start runs bin with args, and the flags every Flux controller takes
// (no metrics, its health probe at health, no leader election, the
// namespaces it watches), with a kubeconfig in tmp, until the test ends.
func start(t TB, c *Controller, tmp, health, namespace, bin string, args ...string) *Controller {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	args = append(args, "--metrics-addr=0", "--health-addr="+health, "--enable-leader-election=false",
		fmt.Sprintf("--watch-all-namespaces=%t", namespace == ""), "--log-level=info")
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(tmp, "kubeconfig"), "RUNTIME_NAMESPACE="+namespace)
	cmd.Stdout, cmd.Stderr = c, c
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("fluxtest: start %s: %v", c.name, err)
	}
	c.pid = cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var once sync.Once
	c.stop = func() {
		once.Do(func() {
			cancel()
			<-exited
		})
	}
	t.Cleanup(func() {
		c.stop()
		if f, ok := t.(interface{ Failed() bool }); ok && f.Failed() {
			t.Logf("%s's log:\n%s", c.name, c.Log())
		}
	})
	waitReady(t, c, health, exited)
	return c
}

// InstallCRDs installs the CRDs source-controller ships (its GitRepository
// replaces the trimmed one of testenv), for a test that plays
// source-controller itself.
func InstallCRDs(t TB, cfg *rest.Config) {
	t.Helper()
	dir, err := SourceControllerDir()
	if err != nil {
		t.Fatalf("%v", err)
	}
	installCRDs(t, cfg, dir)
}

func installCRDs(t TB, cfg *rest.Config, dir string) {
	t.Helper()
	// envtest logs through controller-runtime's logger, which complains,
	// stack and all, when none is set.
	setLogger.Do(func() { ctrllog.SetLogger(logr.Discard()) })
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{filepath.Join(dir, "crds")}, ErrorIfPathMissing: true}); err != nil {
		t.Fatalf("fluxtest: install the CRDs of %s: %v", dir, err)
	}
}

// scratch makes what one controller needs: a directory with a kubeconfig
// of cfg, removed when the test ends, and a free address for its health
// probe.
func scratch(t TB, cfg *rest.Config, name string) (tmp, health string) {
	t.Helper()
	tmp, err := os.MkdirTemp("", name+"-")
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(tmp) }) // after the process's stop, which is registered later
	if err := WriteKubeconfig(cfg, filepath.Join(tmp, "kubeconfig")); err != nil {
		t.Fatalf("fluxtest: %v", err)
	}
	if health, err = testenv.FreeAddr(); err != nil {
		t.Fatalf("%v", err)
	}
	return tmp, health
}

// waitReady waits until the controller's manager says it is ready, and
// fails the test when it exits first or is not ready in a minute.
func waitReady(t TB, c *Controller, health string, exited chan error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("fluxtest: %s exited: %v\n%s", c.name, err, c.Log())
		default:
		}
		if ready(health) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("fluxtest: %s not ready after a minute\n%s", c.name, c.Log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ready asks the controller's readiness probe.
func ready(addr string) bool {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + addr + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

var setLogger sync.Once

// WriteKubeconfig writes a kubeconfig with cfg's server and identity (the
// test control plane's administrator, by client certificate), for a
// program the test runs.
func WriteKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken,
		Username: cfg.Username, Password: cfg.Password,
	}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	kc.CurrentContext = "test"
	return clientcmd.WriteToFile(*kc, path)
}
