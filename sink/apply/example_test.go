package apply_test

import (
	"fmt"

	"github.com/modwatch/modwatch/sink/apply"
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
