package helm_test

import (
	"k8s.io/client-go/rest"

	"github.com/modwatch/modwatch/sink/apply"
	"github.com/modwatch/modwatch/sink/apply/helm"
	"github.com/modwatch/modwatch/sink/apply/kustomize"
	"github.com/modwatch/modwatch/source/static"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
)

// The README's wiring of the apply sink with both renderers. (Compiled,
// not run: it needs a cluster.)
func Example() {
	var restConfig *rest.Config // from the program's kubeconfig or in-cluster configuration
	w := watcher.New()
	if err := wire(w, restConfig); err != nil {
		panic(err)
	}
}

func wire(w *watcher.Watcher, restConfig *rest.Config) error {
	applier, err := apply.New(restConfig, apply.Config{FieldManager: "my-agent",
		Renderers: map[string]apply.Renderer{kustomize.Name: kustomize.New(), helm.Name: helm.New()}}) // helm is a module of its own
	if err != nil {
		return err
	}
	target := watcher.Target{ID: "apps", URL: "https://github.com/acme/apps.git", Path: "deploy",
		Payload: payload.Render{Renderer: kustomize.Name, Namespace: "apps"}} // how to render it, where it goes
	return w.Route(static.New(target), applier) // observers get an *apply.Result per delivery
}
