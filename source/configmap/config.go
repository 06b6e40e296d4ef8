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
	"github.com/modwatch/modwatch/watcher/spec"
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

// GitDefinition is a repository path to apply: a GitSync's spec, and a
// name.
type GitDefinition struct {
	// Name names the definition in a GitDefinitions list (the target ID is
	// built from it); a lone GitDefinition is named "control".
	Name string `json:"name,omitempty"`
	spec.GitSync
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
	case defs == nil:
		return nil, fmt.Errorf("%w: source: no gitDefinition", ErrInvalid)
	case len(defs) == 0:
		// "gitDefinitions: []" says, explicitly, watch nothing.
		return []watcher.Target{}, nil
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
	if d.Destination.Cluster == "" {
		d.Destination.Cluster = c.ClusterName
	}
	return d.GitSync.Target(strings.TrimSuffix(prefix, "/")+"/"+d.Name, time.Duration(c.TimeIntervalSec)*time.Second)
}
