package apply_test

import (
	"fmt"

	"github.com/modwatch/modwatch/sink/apply"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
)

func ExampleDecode() {
	objs, err := apply.Decode("deploy/app.yaml", []byte(`
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
---
# an empty document is skipped
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
`))
	if err != nil {
		panic(err)
	}
	for _, o := range objs {
		fmt.Println(o.GetKind(), o.GetName())
	}
	_, err = apply.Decode("deploy/bad.yaml", []byte("kind: [unclosed"))
	fmt.Println(err != nil)
	// Output:
	// ConfigMap settings
	// Deployment web
	// true
}

// A source says how a target is rendered with a payload.Render in its
// Payload; anything else is refused, naming its type.
func ExamplePayloadSpec() {
	for _, p := range []any{
		nil,
		payload.Render{Renderer: payload.RendererKustomize, Namespace: "apps"},
		map[string]any{"renderer": "helm"},
	} {
		r, err := apply.PayloadSpec(watcher.Target{ID: "app", Payload: p})
		r.Default()
		fmt.Printf("%s %s %v\n", r.Renderer, r.Namespace, err)
	}
	// Output:
	// raw default <nil>
	// kustomize apps <nil>
	// raw default apply: invalid config: target app: payload map[string]interface {} is not a payload.Render (set apply.Config.SpecFunc)
}
