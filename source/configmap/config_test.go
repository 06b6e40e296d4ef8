package configmap_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/source/configmap"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
)

// numaplane is the agent configuration as Numaplane's agents have it.
const numaplane = `clusterName: staging-1
timeIntervalSec: 60
source:
  keyValueGenerator:
    embedded:
      values:
        clusterName: staging-1
        hostName: watcher.staging-1.example.com
  gitDefinition:
    repoUrl: https://git.example.com/platform/control.git
    path: clusters/{{clusterName}}
    targetRevision: main
    helm:
      parameters:
        - name: clusterName
          value: '{{clusterName}}'
        - name: host
          value: '{{ hostName }}'
`

func TestParseNumaplaneConfig(t *testing.T) {
	targets, err := configmap.Parse([]byte(numaplane), "configmap")
	require.NoError(t, err)
	require.Len(t, targets, 1)
	got := targets[0]
	assert.Equal(t, "configmap/control", got.ID)
	assert.Equal(t, "https://git.example.com/platform/control.git", got.URL)
	assert.Equal(t, "clusters/staging-1", got.Path)
	assert.Equal(t, "main", got.Revision)
	assert.Equal(t, time.Minute, got.Interval)
	assert.Equal(t, payload.Render{
		Renderer: "helm", Cluster: "staging-1",
		Helm: &payload.Helm{Parameters: []payload.HelmParameter{
			{Name: "clusterName", Value: "staging-1"},
			{Name: "host", Value: "watcher.staging-1.example.com"},
		}},
	}, got.Payload)
}

func TestParseList(t *testing.T) {
	targets, err := configmap.Parse([]byte(`{"source": {"gitDefinitions": [
		{"name": "infra", "repoUrl": "https://git.example.com/infra.git", "kustomize": {}, "destination": {"namespace": "infra"}},
		{"name": "apps", "repoUrl": "https://git.example.com/apps.git", "targetRevision": "v1.2.0"}
	]}}`), "agent")
	require.NoError(t, err)
	require.Len(t, targets, 2)
	assert.Equal(t, "agent/infra", targets[0].ID)
	assert.Equal(t, payload.Render{Renderer: "kustomize", Namespace: "infra"}, targets[0].Payload)
	assert.Equal(t, "agent/apps", targets[1].ID)
	assert.Equal(t, payload.Render{Renderer: "raw"}, targets[1].Payload)
	assert.Zero(t, targets[1].Interval)
}

func TestParseErrors(t *testing.T) {
	def := func(s string) string { return "source:\n  gitDefinition:\n" + s }
	tests := []struct{ name, in, err string }{
		{"not yaml", "source: [\n  x", "line"},
		{"bad indentation", "source:\n  gitDefinition:\n    repoUrl: a\n   path: b\n", "line 3"},
		{"missing key", def("    repoUrl: https://h/r.git\n    path: '{{nope}}'\n"), "source.gitDefinition.path: no value for placeholder {{nope}}"},
		{"malformed placeholder", def("    repoUrl: https://h/r.git\n    path: '{{ two words }}'\n"), "malformed placeholder"},
		{"no definition", "clusterName: a\n", "no gitDefinition"},
		{"both forms", "source:\n  gitDefinition: {repoUrl: https://h/r.git}\n  gitDefinitions: [{name: a, repoUrl: https://h/r.git}]\n", "both set"},
		{"two renderers", def("    repoUrl: https://h/r.git\n    raw: {}\n    helm: {}\n"), "at most one"},
		{"no url", def("    path: x\n"), "url"},
		{"escaping path", def("    repoUrl: https://h/r.git\n    path: ../../etc\n"), "path"},
		{"duplicate names", "source:\n  gitDefinitions: [{name: a, repoUrl: https://h/r.git}, {name: a, repoUrl: https://h/s.git}]\n", "used twice"},
		{"unnamed in list", "source:\n  gitDefinitions: [{repoUrl: https://h/r.git}]\n", "gitDefinitions[0]"},
		{"negative interval", "timeIntervalSec: -1\nsource:\n  gitDefinition: {repoUrl: https://h/r.git}\n", "negative"},
		{"wrong type", "timeIntervalSec: often\nsource:\n  gitDefinition: {repoUrl: https://h/r.git}\n", "timeIntervalSec"},
		{"empty helm parameter", def("    repoUrl: https://h/r.git\n    helm: {parameters: [{value: x}]}\n"), "parameters[0]"},
		{"unknown key", "logLevel: 3\nsource:\n  gitDefinition: {repoUrl: https://h/r.git}\n", "unknown keys: logLevel"},
		{"unknown nested key", def("    repoUrl: https://h/r.git\n    revision: main\n"), "unknown field \"revision\""},
		{"credential unresolved", def("    repoUrl: https://h/r.git\n    repoCredential: {httpCredential: {username: a}}\n"), "resolves none"},
		{"bad credential", def("    repoUrl: https://h/r.git\n    repoCredential: {sshCredential: {SSHKey: {fromFile: {jsonFilePath: k, key: k}}}}\n"), "repoCredential.sshCredential: no knownHosts"},
		{"reference without reader", "source:\n  keyValueGenerator: {reference: {files: [{repoUrl: https://h/v.git, path: v.json}]}}\n  gitDefinition: {repoUrl: https://h/r.git}\n", "gives no way to read its files"},
		{"both generators", "source:\n  keyValueGenerator: {embedded: {values: {}}, reference: {files: [{repoUrl: https://h/v.git, path: v.json}]}}\n  gitDefinition: {repoUrl: https://h/r.git}\n", "both set"},
		{"reference file escaping", "source:\n  keyValueGenerator: {reference: {files: [{repoUrl: https://h/v.git, path: ../v.json}]}}\n  gitDefinition: {repoUrl: https://h/r.git}\n", "files[0].path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := configmap.Parse([]byte(tt.in), "configmap")
			require.Error(t, err)
			assert.True(t, errors.Is(err, configmap.ErrInvalid) || errors.Is(err, watcher.ErrInvalidTarget), "%v", err)
			assert.Contains(t, err.Error(), tt.err)
		})
	}
}

func TestPlaceholderValuesCannotChangeStructure(t *testing.T) {
	targets, err := configmap.Parse([]byte(`source:
  keyValueGenerator: {embedded: {values: {evil: "x\n  targetRevision: attacker"}}}
  gitDefinition: {repoUrl: https://h/r.git, targetRevision: main, helm: {parameters: [{name: a, value: "{{evil}}"}]}}
`), "configmap")
	require.NoError(t, err)
	assert.Equal(t, "main", targets[0].Revision)
	assert.True(t, strings.Contains(targets[0].Payload.(payload.Render).Helm.Parameters[0].Value, "attacker"))
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(numaplane))
	f.Add([]byte(`{"source":{"gitDefinitions":[{"name":"a","repoUrl":"https://h/r.git","kustomize":{}}]}}`))
	f.Add([]byte("source:\n  gitDefinition: {repoUrl: '{{a}}'}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		targets, err := configmap.Parse(data, "configmap")
		if err != nil {
			return
		}
		if len(targets) == 0 {
			t.Fatal("no error and no targets")
		}
		for _, tg := range targets {
			if err := tg.Validate(); err != nil {
				t.Fatalf("invalid target returned: %v", err)
			}
		}
	})
}
