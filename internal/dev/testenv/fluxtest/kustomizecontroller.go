package fluxtest

import (
	"errors"
	"path/filepath"

	"k8s.io/client-go/rest"
)

// KustomizeControllerVersion is the version of Flux's kustomize-controller
// that `make testbin` builds from its Go module
// (internal/dev/testbin/kustomizecontroller): the one of source-controller's
// Flux release.
const KustomizeControllerVersion = "v1.9.0"

// ErrNoKustomizeController is returned when the kustomize-controller
// binary cannot be found.
var ErrNoKustomizeController = errors.New("fluxtest: kustomize-controller not found; run `make testbin` (or `make test`) first")

// KustomizeControllerDir returns the directory holding the
// kustomize-controller binary and the CRDs it ships (crds/):
// kustomize-controller-<version>, beside the control plane's binaries.
func KustomizeControllerDir() (string, error) {
	return controllerDir("kustomize-controller", KustomizeControllerVersion, ErrNoKustomizeController)
}

// StartKustomizeControllerIn installs the CRDs of source-controller and
// kustomize-controller (a Kustomization's source is a GitRepository) and
// runs kustomize-controller, watching namespace only, or every namespace
// when it is "", with cfg's identity: it fetches the artifacts the
// GitRepositories' statuses name and applies them. It is stopped when the
// test ends; its log is shown if the test failed.
func StartKustomizeControllerIn(t TB, cfg *rest.Config, namespace string) *Controller {
	t.Helper()
	sc, err := SourceControllerDir()
	if err != nil {
		t.Fatalf("%v", err)
	}
	dir, err := KustomizeControllerDir()
	if err != nil {
		t.Fatalf("%v", err)
	}
	installCRDs(t, cfg, sc)
	installCRDs(t, cfg, dir)
	tmp, health := scratch(t, cfg, "kustomize-controller")
	// Its events go nowhere; it looks for no notification-controller.
	return start(t, &Controller{name: "kustomize-controller"}, tmp, health, namespace, filepath.Join(dir, "kustomize-controller"),
		"--concurrent=4", "--events-addr=", "--requeue-dependency=1s")
}
