package configmap

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/modwatch/modwatch/watcher"
)

// Config is the agent's configuration file, in Numaplane's agent format.
// Fields other than these are accepted and ignored, so an existing
// Numaplane agent ConfigMap works unchanged.
type Config struct {
	// ClusterName is the cluster the agent runs in.
	ClusterName string `json:"clusterName,omitempty"`
	// TimeIntervalSec is the poll interval in seconds; 0 leaves the
	// watcher's.
	TimeIntervalSec int          `json:"timeIntervalSec,omitempty"`
	Source          SourceConfig `json:"source"`
}

// SourceConfig names the control repositories and the values of their
// placeholders.
type SourceConfig struct {
	KeyValueGenerator KeyValueGenerator `json:"keyValueGenerator,omitzero"`
	// GitDefinition is the control repository (Numaplane's form);
	// GitDefinitions a handful of them, each with a unique Name. Exactly one
	// of the two is set.
	GitDefinition  *GitDefinition  `json:"gitDefinition,omitempty"`
	GitDefinitions []GitDefinition `json:"gitDefinitions,omitempty"`
}

// KeyValueGenerator gives the values of "{{key}}" placeholders.
type KeyValueGenerator struct {
	Embedded struct {
		Values map[string]string `json:"values,omitempty"`
	} `json:"embedded,omitzero"`
}

// GitDefinition is a repository path to apply, with GitSync's fields.
type GitDefinition struct {
	// Name names the definition in a GitDefinitions list (the target ID is
	// built from it); a lone GitDefinition is named "control".
	Name           string      `json:"name,omitempty"`
	RepoURL        string      `json:"repoUrl"`
	Path           string      `json:"path,omitempty"`
	TargetRevision string      `json:"targetRevision,omitempty"`
	Raw            *struct{}   `json:"raw,omitempty"`
	Kustomize      *struct{}   `json:"kustomize,omitempty"`
	Helm           *Helm       `json:"helm,omitempty"`
	Destination    Destination `json:"destination,omitzero"`
}

// Helm is GitSync's HelmSource.
type Helm struct {
	ValueFiles []string        `json:"valueFiles,omitempty"`
	Parameters []HelmParameter `json:"parameters,omitempty"`
}

// HelmParameter is one `--set name=value`.
type HelmParameter struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Destination is where namespaced objects without a namespace go.
type Destination struct {
	Namespace string `json:"namespace,omitempty"`
}

// Payload is what each target carries for its sinks. Its JSON form
// ("renderer", "namespace", "helm") is what sink/apply reads as its Spec.
type Payload struct {
	// Renderer is "raw", "kustomize" or "helm".
	Renderer  string `json:"renderer"`
	Namespace string `json:"namespace,omitempty"`
	Helm      *Helm  `json:"helm,omitempty"`
	// ClusterName is the agent's cluster, from the configuration.
	ClusterName string `json:"clusterName,omitempty"`
}

// ErrInvalid is returned (wrapped) for a configuration that cannot be
// used; the message names the field, the line or the missing key.
var ErrInvalid = errors.New("configmap: invalid configuration")

// placeholder is "{{key}}", spaces allowed inside the braces.
var placeholder = regexp.MustCompile(`\{\{\s*([A-Za-z0-9_.-]+)\s*\}\}`)

// Parse reads a configuration (YAML or JSON), fills its placeholders and
// returns its targets, their IDs prefixed with prefix ("configmap/control").
func Parse(data []byte, prefix string) ([]watcher.Target, error) {
	var raw map[string]any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	var cfg Config
	if err := decode(raw, &cfg); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	// Placeholders are filled in the parsed definitions, string by string,
	// so that a value cannot change the document's structure.
	src, _ := raw["source"].(map[string]any)
	for _, key := range []string{"gitDefinition", "gitDefinitions"} {
		if v, ok := src[key]; ok {
			filled, err := fill(v, cfg.Source.KeyValueGenerator.Embedded.Values, "source."+key)
			if err != nil {
				return nil, err
			}
			src[key] = filled
		}
	}
	if err := decode(raw, &cfg); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return cfg.Targets(prefix)
}

func decode(raw map[string]any, cfg *Config) error {
	data, err := json.Marshal(raw)
	if err != nil {
		return err
	}
	*cfg = Config{}
	dec := json.NewDecoder(bytes.NewReader(data))
	return dec.Decode(cfg)
}

// fill replaces the placeholders in every string of v.
func fill(v any, values map[string]string, at string) (any, error) {
	switch v := v.(type) {
	case string:
		var missing string
		out := placeholder.ReplaceAllStringFunc(v, func(m string) string {
			key := placeholder.FindStringSubmatch(m)[1]
			val, ok := values[key]
			if !ok && missing == "" {
				missing = key
			}
			return val
		})
		if missing != "" {
			return nil, fmt.Errorf("%w: %s: no value for placeholder {{%s}}", ErrInvalid, at, missing)
		}
		if strings.Contains(placeholder.ReplaceAllString(v, ""), "{{") {
			return nil, fmt.Errorf("%w: %s: malformed placeholder in %q", ErrInvalid, at, v)
		}
		return out, nil
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			f, err := fill(v[k], values, at+"."+k)
			if err != nil {
				return nil, err
			}
			v[k] = f
		}
		return v, nil
	case []any:
		for i := range v {
			f, err := fill(v[i], values, fmt.Sprintf("%s[%d]", at, i))
			if err != nil {
				return nil, err
			}
			v[i] = f
		}
		return v, nil
	default:
		return v, nil
	}
}

// Targets validates c and returns its targets.
func (c Config) Targets(prefix string) ([]watcher.Target, error) {
	if c.TimeIntervalSec < 0 {
		return nil, fmt.Errorf("%w: timeIntervalSec is negative", ErrInvalid)
	}
	defs := c.Source.GitDefinitions
	switch {
	case c.Source.GitDefinition != nil && len(defs) > 0:
		return nil, fmt.Errorf("%w: source: gitDefinition and gitDefinitions are both set", ErrInvalid)
	case c.Source.GitDefinition != nil:
		d := *c.Source.GitDefinition
		if d.Name == "" {
			d.Name = "control"
		}
		defs = []GitDefinition{d}
	case len(defs) == 0:
		return nil, fmt.Errorf("%w: source: no gitDefinition", ErrInvalid)
	}
	seen := map[string]bool{}
	var out []watcher.Target
	for i, d := range defs {
		at := fmt.Sprintf("source.gitDefinitions[%d]", i)
		if c.Source.GitDefinition != nil {
			at = "source.gitDefinition"
		}
		t, err := d.target(prefix, c)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, at, err)
		}
		if seen[t.ID] {
			return nil, fmt.Errorf("%w: %s: name %q is used twice", ErrInvalid, at, d.Name)
		}
		seen[t.ID] = true
		out = append(out, t)
	}
	return out, nil
}

var validName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)

func (d GitDefinition) target(prefix string, c Config) (watcher.Target, error) {
	if !validName.MatchString(d.Name) {
		return watcher.Target{}, fmt.Errorf("name %q is not a DNS-1123 name", d.Name)
	}
	p := Payload{Renderer: "raw", Namespace: d.Destination.Namespace, ClusterName: c.ClusterName}
	n := 0
	if d.Raw != nil {
		n++
	}
	if d.Kustomize != nil {
		n++
		p.Renderer = "kustomize"
	}
	if d.Helm != nil {
		n++
		p.Renderer, p.Helm = "helm", d.Helm
	}
	if n > 1 {
		return watcher.Target{}, errors.New("at most one of raw, kustomize and helm may be set")
	}
	for i, hp := range p.helmParameters() {
		if hp.Name == "" {
			return watcher.Target{}, fmt.Errorf("helm.parameters[%d]: name is empty", i)
		}
	}
	t := watcher.Target{
		ID:       strings.TrimSuffix(prefix, "/") + "/" + d.Name,
		URL:      d.RepoURL,
		Revision: d.TargetRevision,
		Path:     d.Path,
		Interval: time.Duration(c.TimeIntervalSec) * time.Second,
		Payload:  p,
	}
	if err := t.Validate(); err != nil {
		return watcher.Target{}, err
	}
	return t, nil
}

func (p Payload) helmParameters() []HelmParameter {
	if p.Helm == nil {
		return nil
	}
	return p.Helm.Parameters
}
