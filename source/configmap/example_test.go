package configmap_test

import (
	"fmt"

	"github.com/modwatch/modwatch/source/configmap"
)

func ExampleParse() {
	targets, err := configmap.Parse([]byte(`
clusterName: staging-1
timeIntervalSec: 60
source:
  keyValueGenerator:
    embedded:
      values: {clusterName: staging-1}
  gitDefinition:
    repoUrl: https://git.example.com/platform/control.git
    path: clusters/{{clusterName}}
    targetRevision: main
    kustomize: {}
`), "agent")
	if err != nil {
		panic(err)
	}
	t := targets[0]
	fmt.Println(t.ID, t.Path, t.Revision, t.Interval)
	// Output: agent/control clusters/staging-1 main 1m0s
}
