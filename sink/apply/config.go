package apply

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/modwatch/modwatch/watcher"
)

// ConflictPolicy says what to do when another field manager owns a field
// the target sets.
type ConflictPolicy string

const (
	// ConflictForce takes the field over, as Flux does. The default.
	ConflictForce ConflictPolicy = "Force"
	// ConflictReport fails the object with the apiserver's conflict error
	// and leaves it as it is.
	ConflictReport ConflictPolicy = "Report"
)

// Mode says whether a delivery writes to the cluster.
type Mode string

const (
	// ModeApply applies and prunes. The default.
	ModeApply Mode = "Apply"
	// ModeDryRun computes what ModeApply would do, through server-side dry
	// runs, and writes nothing.
	ModeDryRun Mode = "DryRun"
	// ModeDiff is ModeDryRun that also returns, for each object that would
	// be configured, the live object and the object as it would be
	// (Entry.Live and Entry.Merged; Secret data masked).
	ModeDiff Mode = "Diff"
)

// Config is how the sink applies. The zero value, defaulted, applies with
// force under the field manager "modwatch" and prunes.
type Config struct {
	// FieldManager owns the fields the sink applies. Default "modwatch".
	FieldManager string
	// Conflicts is ConflictForce (default) or ConflictReport.
	Conflicts ConflictPolicy
	// Mode is ModeApply (default), ModeDryRun or ModeDiff.
	Mode Mode
	// DisablePrune keeps objects that a target applied before and that are
	// gone from its commit; they are forgotten, not deleted.
	DisablePrune bool
	// CascadeDelete makes Remove delete every object the target owns.
	// Without it, Remove only forgets the target (its inventory) and the
	// objects stay.
	CascadeDelete bool
	// AlwaysCheckDrift makes a new commit check every object for drift.
	// By default a new commit dry-runs only the objects whose rendered
	// manifest changed since the target's last apply (the inventory keeps
	// a digest of each); every object is checked, and drift corrected, on
	// the first delivery, when the target changes and on resyncs
	// (watcher.WithResync).
	AlwaysCheckDrift bool
	// InventoryNamespace holds the inventory ConfigMaps. Default "default".
	InventoryNamespace string
	// Concurrency is how many objects are checked and applied at once.
	// Default 8.
	Concurrency int
	// WaitTimeout bounds the wait for cluster definitions (CRDs,
	// Namespaces) to be ready before the objects that need them are
	// applied. Default 1m.
	WaitTimeout time.Duration
}

// Default fills the unset fields.
func (c *Config) Default() {
	if c.FieldManager == "" {
		c.FieldManager = "modwatch"
	}
	if c.Conflicts == "" {
		c.Conflicts = ConflictForce
	}
	if c.Mode == "" {
		c.Mode = ModeApply
	}
	if c.InventoryNamespace == "" {
		c.InventoryNamespace = "default"
	}
	if c.Concurrency == 0 {
		c.Concurrency = 8
	}
	if c.WaitTimeout == 0 {
		c.WaitTimeout = time.Minute
	}
}

// ErrInvalidConfig is returned (wrapped) by [Config.Validate] and
// [Spec.Validate].
var ErrInvalidConfig = errors.New("apply: invalid config")

// Validate checks a defaulted Config.
func (c Config) Validate() error {
	switch {
	case c.Conflicts != ConflictForce && c.Conflicts != ConflictReport:
		return fmt.Errorf("%w: conflicts %q is neither %s nor %s", ErrInvalidConfig, c.Conflicts, ConflictForce, ConflictReport)
	case c.Mode != ModeApply && c.Mode != ModeDryRun && c.Mode != ModeDiff:
		return fmt.Errorf("%w: mode %q is not %s, %s or %s", ErrInvalidConfig, c.Mode, ModeApply, ModeDryRun, ModeDiff)
	case c.Concurrency < 0:
		return fmt.Errorf("%w: concurrency is negative", ErrInvalidConfig)
	case c.WaitTimeout < 0:
		return fmt.Errorf("%w: wait timeout is negative", ErrInvalidConfig)
	case len(c.FieldManager) > 128:
		return fmt.Errorf("%w: field manager is longer than 128 characters", ErrInvalidConfig)
	}
	return nil
}

// Spec is how one target is rendered and where it goes; the sink finds it
// in the target's Payload (see [PayloadSpec] and [WithSpecFunc]). Its JSON
// form is the contract with sources that do not import this package.
type Spec struct {
	// Renderer names the renderer: "raw" (default), or one registered with
	// [WithRenderer] ("kustomize", "helm").
	Renderer string `json:"renderer,omitempty"`
	// Namespace is set on namespaced objects that have none. Cluster-scoped
	// objects are never given one. Default "default".
	Namespace string `json:"namespace,omitempty"`
	// Helm is for the Helm renderer.
	Helm HelmSpec `json:"helm,omitzero"`
}

// HelmSpec is a Helm render, as Numaplane's HelmSource has it.
type HelmSpec struct {
	// ReleaseName defaults to the last segment of the target ID.
	ReleaseName string `json:"releaseName,omitempty"`
	// ValueFiles are paths inside the chart, merged in order over the
	// chart's values.yaml.
	ValueFiles []string `json:"valueFiles,omitempty"`
	// Parameters are set after the value files, like `helm --set`.
	Parameters []HelmParameter `json:"parameters,omitempty"`
}

// HelmParameter is one `--set name=value`; Value is taken literally.
type HelmParameter struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// RendererRaw is the name of the built-in renderer.
const RendererRaw = "raw"

// Default fills the unset fields.
func (s *Spec) Default() {
	if s.Renderer == "" {
		s.Renderer = RendererRaw
	}
	if s.Namespace == "" {
		s.Namespace = "default"
	}
}

// SpecFunc finds a target's Spec.
type SpecFunc func(t watcher.Target) (Spec, error)

// PayloadSpec is the default SpecFunc: the target's Payload when it is a
// Spec or *Spec, the default Spec when Payload is nil; any other Payload is
// read through its JSON form, whose "renderer", "namespace" and "helm"
// fields are Spec's (other fields are ignored). So a source describes a
// render without importing this package (source/configmap and
// source/gitsync do).
func PayloadSpec(t watcher.Target) (Spec, error) {
	switch p := t.Payload.(type) {
	case nil:
		return Spec{}, nil
	case Spec:
		return p, nil
	case *Spec:
		if p == nil {
			return Spec{}, nil
		}
		return *p, nil
	default:
		var spec Spec
		data, err := json.Marshal(p)
		if err == nil {
			err = json.Unmarshal(data, &spec)
		}
		if err != nil {
			return Spec{}, fmt.Errorf("%w: target %s: payload %T does not read as an apply.Spec (use apply.WithSpecFunc): %w", ErrInvalidConfig, t.ID, t.Payload, err)
		}
		return spec, nil
	}
}
