package apply

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
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

// IncludeMode says what [Config.Include] means for an object of a kind it
// leaves out.
type IncludeMode string

const (
	// IncludeStrict: Include says which kinds a target may apply; an
	// object of another kind fails the delivery before anything is applied
	// ([watcher.Permanent]), naming it. The default.
	IncludeStrict IncludeMode = "Strict"
	// IncludeSkip: Include says which kinds the program manages, as
	// Numaplane's includedResources does. An object of another kind is
	// left alone: not applied, not checked for drift, not pruned, not
	// deleted by cascade; the delivery goes on, and its Result lists the
	// object as Skipped with [SkipNotIncluded]. An object the target
	// applied while its kind was included stays in the target's inventory,
	// left alone as long as its kind is not: included again, it is applied
	// if the target renders it and pruned if not; a removal forgets it.
	IncludeSkip IncludeMode = "Skip"
)

// Config is how the sink applies. The zero value, defaulted, applies with
// force under the field manager "modwatch" and prunes.
type Config struct {
	// FieldManager owns the fields the sink applies. Default "modwatch".
	FieldManager string
	// Instance names the program's installation among those that share a
	// field manager and an inventory namespace (two installs of one
	// controller, each for its namespaces): its inventories carry it, and
	// the sink lists, sweeps and prunes only its own. Programs set it from
	// what tells their installs apart (a -name flag, the namespace they
	// watch) and say it at start. Empty: the inventories of a sink without
	// an instance, as before instances existed.
	Instance string
	// EmptyRenderConfirm is how long a render that became empty must stay
	// empty before the target's objects are pruned: until then the
	// delivery fails, saying the prune is held, and is retried. Default 5m;
	// negative: pruned at once. (The watcher's own budget,
	// watcher.WithRemovalBudget, holds targets removed many at once.)
	EmptyRenderConfirm time.Duration
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
	// CascadeDeleteFunc, when set, is asked at each Remove instead of
	// CascadeDelete: for a configuration that changes while the program
	// runs (Numaplane's cascadeDeletion).
	CascadeDeleteFunc func() bool
	// TrackingLabel is the label every applied object carries, whose value
	// names its target (see TrackingValue); prune and cascade deletion
	// touch only objects it marks as the target's.
	// Default [LabelTarget]; Numaplane's is "numaplane.numaproj.io/tracking-id".
	TrackingLabel string
	// TrackingValue, when set, chooses the value of TrackingLabel on each
	// target's objects, for a program whose users select them by a name of
	// theirs (Numaplane's: the GitSync's name, gitsync.TrackingValue). It
	// must return a label value, not empty: another fails the delivery
	// ([watcher.Permanent]) naming the target and the value, before
	// anything is applied. Default: a digest of the field manager, the
	// instance and the target ID, one per target, as before it existed.
	//
	// Values may be shared (two GitSyncs named web in two namespaces), so
	// the sink never goes by the value alone: an object whose value is not
	// the digest also carries [AnnotationOwner], the digest, and prune,
	// cascade deletion and the guard go by that. A target never prunes,
	// deletes or takes over an object another target or install applied
	// under the same value; an object that carries this label and value
	// but that no target of this sink applied (another program's, another
	// install's) is refused as any foreign object is, until its label is
	// taken off. A value that changes (from the digest to names) relabels
	// the target's objects at its next apply; those applied under the old
	// value are pruned and cascade-deleted as before.
	TrackingValue func(watcher.Target) string
	// AdoptByValue takes over an object that carries the target's tracking
	// label and value and no [AnnotationOwner]: an object marked by its
	// value alone, as a program moving to the library marked it (Numaplane
	// marks a GitSync's objects with its name), which this target's
	// manifests render, in the target's destination namespace
	// (payload.Render.Namespace). Values may be shared (two GitSyncs of one
	// name): a cluster-scoped object, or one in another namespace, tells
	// nothing of which one applied it, and is refused as below (in a
	// destination that two targets of one value share, the first to render
	// it takes it: give them destinations apart). Off (the default), such
	// an object is refused as another program's until its label is taken
	// off. Objects this sink's targets applied carry the annotation under a
	// value of their own, or a digest as value (the default, without
	// TrackingValue), which is never adopted: a target whose value is
	// another's digest (a GitSync named so) goes by that owner's
	// inventory, as for any object.
	AdoptByValue bool
	// Include, when set, says which kinds a target may apply: an object of
	// another kind fails the delivery before anything is applied, naming
	// it ([watcher.Permanent]: the next commit, or a resync, tries again),
	// or with IncludeMode IncludeSkip is left alone.
	Include func(schema.GroupKind) bool
	// IncludeMode is IncludeStrict (default) or IncludeSkip (Numaplane's
	// includedResources, which say what it manages); IncludeSkip needs
	// Include.
	IncludeMode IncludeMode
	// ForceNamespace puts every namespaced object into the target's
	// destination namespace, whatever namespace its manifest names, as
	// Numaplane does. By default a manifest's own namespace wins, and the
	// destination is where objects without one go.
	ForceNamespace bool
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
	// Renderers are the renderers a target's payload.Render.Renderer selects,
	// by that name: for instance {kustomize.Name: kustomize.New(),
	// helm.Name: helm.New()}. "raw" ([Raw]) is always there; an entry
	// named "raw" takes its place.
	Renderers map[string]Renderer
	// SpecFunc says how a target's payload.Render is found. Default
	// [PayloadSpec].
	SpecFunc SpecFunc
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
	if c.IncludeMode == "" {
		c.IncludeMode = IncludeStrict
	}
	if c.InventoryNamespace == "" {
		c.InventoryNamespace = "default"
	}
	if c.TrackingLabel == "" {
		c.TrackingLabel = LabelTarget
	}
	if c.Concurrency == 0 {
		c.Concurrency = 8
	}
	if c.WaitTimeout == 0 {
		c.WaitTimeout = time.Minute
	}
	if c.SpecFunc == nil {
		c.SpecFunc = PayloadSpec
	}
	if c.EmptyRenderConfirm == 0 {
		c.EmptyRenderConfirm = 5 * time.Minute
	}
}

// ErrInvalidConfig is returned (wrapped) by [Config.Validate], and for a
// target whose render cannot be found.
var ErrInvalidConfig = errors.New("apply: invalid config")

// Validate checks a defaulted Config.
func (c Config) Validate() error {
	switch {
	case c.Conflicts != ConflictForce && c.Conflicts != ConflictReport:
		return fmt.Errorf("%w: conflicts %q is neither %s nor %s", ErrInvalidConfig, c.Conflicts, ConflictForce, ConflictReport)
	case c.Mode != ModeApply && c.Mode != ModeDryRun && c.Mode != ModeDiff:
		return fmt.Errorf("%w: mode %q is not %s, %s or %s", ErrInvalidConfig, c.Mode, ModeApply, ModeDryRun, ModeDiff)
	case c.IncludeMode != IncludeStrict && c.IncludeMode != IncludeSkip:
		return fmt.Errorf("%w: include mode %q is neither %s nor %s", ErrInvalidConfig, c.IncludeMode, IncludeStrict, IncludeSkip)
	case c.IncludeMode == IncludeSkip && c.Include == nil:
		return fmt.Errorf("%w: include mode %s without Include: no kind is left out", ErrInvalidConfig, IncludeSkip)
	case c.Concurrency < 0:
		return fmt.Errorf("%w: concurrency is negative", ErrInvalidConfig)
	case c.WaitTimeout < 0:
		return fmt.Errorf("%w: wait timeout is negative", ErrInvalidConfig)
	case len(c.FieldManager) > 128:
		return fmt.Errorf("%w: field manager is longer than 128 characters", ErrInvalidConfig)
	case len(c.Instance) > 253 || strings.ContainsAny(c.Instance, "\x00\n"):
		return fmt.Errorf("%w: instance %q: at most 253 characters, no NUL or newline", ErrInvalidConfig, c.Instance)
	}
	for name, r := range c.Renderers {
		if name == "" || r == nil {
			return fmt.Errorf("%w: renderer %q is empty", ErrInvalidConfig, name)
		}
	}
	if errs := validation.IsQualifiedName(c.TrackingLabel); len(errs) > 0 {
		return fmt.Errorf("%w: tracking label %q: %s", ErrInvalidConfig, c.TrackingLabel, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Label(c.InventoryNamespace); len(errs) > 0 {
		return fmt.Errorf("%w: inventory namespace %q: %s", ErrInvalidConfig, c.InventoryNamespace, strings.Join(errs, "; "))
	}
	return nil
}

// outside reports whether the objects of gk are left alone: outside
// Include, under IncludeSkip.
func (c Config) outside(gk schema.GroupKind) bool {
	return c.IncludeMode == IncludeSkip && c.Include != nil && !c.Include(gk)
}

// cascade says whether Remove deletes the target's objects.
func (c Config) cascade() bool {
	if c.CascadeDeleteFunc != nil {
		return c.CascadeDeleteFunc()
	}
	return c.CascadeDelete
}

// SpecFunc finds how a target is rendered.
type SpecFunc func(t watcher.Target) (payload.Render, error)

// PayloadSpec is the default SpecFunc: the target's Payload when it is a
// payload.Render or *payload.Render (source/gitsync and source/configmap give
// one), the default Render when Payload is nil or a nil *payload.Render. Any other Payload is an
// error naming its type: a source with its own payload passes
// [Config.SpecFunc].
func PayloadSpec(t watcher.Target) (payload.Render, error) {
	if p, isPtr := t.Payload.(*payload.Render); t.Payload == nil || isPtr && p == nil {
		return payload.Render{}, nil
	}
	r, ok := payload.Of[payload.Render](t)
	if !ok {
		return payload.Render{}, fmt.Errorf("%w: target %s: payload %T is not a payload.Render (set apply.Config.SpecFunc)", ErrInvalidConfig, t.ID, t.Payload)
	}
	return r, nil
}
