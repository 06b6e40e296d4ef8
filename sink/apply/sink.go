package apply

import (
	"context"
	"fmt"
	"maps"
	"path"
	"sync/atomic"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/polling"
	"github.com/fluxcd/pkg/ssa"
	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
)

// Sink renders and applies targets. It is safe for concurrent use by one
// watcher (which never delivers the same target twice at once).
type Sink struct {
	cfg       Config
	client    client.Client
	rm        *ssa.ResourceManager
	renderers map[string]Renderer
	spec      SpecFunc

	inventoryNS atomic.Bool // the inventory namespace was found
	empty       emptyHold   // targets whose render became empty
	claims      claims      // objects deliveries under way may create
}

var (
	_ watcher.Sink      = (*Sink)(nil)
	_ watcher.Reporter  = (*Sink)(nil)
	_ watcher.Remover   = (*Sink)(nil)
	_ watcher.Inventory = (*Sink)(nil)
	_ watcher.Forgetter = (*Sink)(nil)
	_ watcher.Namer     = (*Sink)(nil)
)

// New returns a sink that applies to the cluster kube reaches, through a
// client that reads the apiserver (no cache), with a 30s request timeout
// when kube has none. Its name is "apply": two apply sinks of one route (two
// clusters) are named apart with watcher.Named.
func New(kube *rest.Config, cfg Config) (*Sink, error) {
	cfg.Default()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Sink{cfg: cfg, renderers: map[string]Renderer{payload.RendererRaw: Raw}, spec: cfg.SpecFunc}
	maps.Copy(s.renderers, cfg.Renderers)
	if kube == nil {
		return nil, fmt.Errorf("%w: no rest.Config", ErrInvalidConfig)
	}
	kube = rest.CopyConfig(kube)
	if kube.Timeout == 0 {
		kube.Timeout = 30 * time.Second
	}
	c, err := client.New(kube, client.Options{})
	if err != nil {
		return nil, fmt.Errorf("apply: client: %w", err)
	}
	s.client = c
	var rmClient = s.client
	if cfg.Conflicts == ConflictReport {
		rmClient = noForce{s.client}
	}
	poller := polling.NewStatusPoller(s.client, s.client.RESTMapper(), polling.Options{})
	s.rm = ssa.NewResourceManager(rmClient, poller, ssa.Owner{Field: cfg.FieldManager, Group: "apply.modwatch.io"})
	s.rm.SetConcurrency(cfg.Concurrency)
	return s, nil
}

// Name returns the sink's name.
func (s *Sink) Name() string { return "apply" }

// Deliver applies c; see [Sink.Apply].
func (s *Sink) Deliver(ctx context.Context, c watcher.Change) error {
	_, err := s.Apply(ctx, c)
	return err
}

// DeliverReport is [Sink.Apply] for the watcher: the report is the
// *Result.
func (s *Sink) DeliverReport(ctx context.Context, c watcher.Change) (any, error) {
	return s.Apply(ctx, c)
}

// Apply renders c.FS and applies the objects, then prunes what the
// target's inventory holds and the commit no longer has. A render error or
// a bad Spec is [watcher.Permanent]: nothing is applied and the commit is
// not retried. Objects that fail to apply are reported in the Result and
// the delivery fails (and is retried); the others are applied, and nothing
// is pruned.
func (s *Sink) Apply(ctx context.Context, c watcher.Change) (*Result, error) {
	res := &Result{Target: c.Target.ID, Commit: c.To, Mode: s.cfg.Mode}
	objs, err := s.render(ctx, c, res)
	if err != nil {
		return res, err
	}
	if err := s.checkInventoryNamespace(ctx); err != nil {
		return res, err
	}
	old, err := s.readInventory(ctx, c.Target.ID)
	if err != nil {
		return res, err
	}
	release, err := s.guard(ctx, c.Target.ID, s.destination(c.Target), objs, old)
	defer release()
	if err != nil {
		return res, err
	}
	if s.cfg.Mode == ModeApply {
		if err := s.holdEmpty(c.Target.ID, len(objs), s.managedCount(old)); err != nil {
			return res, err
		}
	}
	if s.cfg.Mode != ModeApply {
		s.plan(ctx, objs, old, res)
		return res, res.err()
	}
	if err := s.apply(ctx, objs, c.Reason, old, res); err != nil {
		return res, err
	}
	logr.FromContextOrDiscard(ctx).V(1).Info("applied", "target", c.Target.ID, "commit", c.To.String(), "result", res.String())
	return res, res.err()
}

// render finds how the target is rendered, and its renderer, and makes its objects ready
// to apply.
func (s *Sink) render(ctx context.Context, c watcher.Change, res *Result) ([]*unstructured.Unstructured, error) {
	rs, err := s.spec(c.Target)
	if err != nil {
		return nil, watcher.Permanent(err)
	}
	rs.Default()
	if err := rs.Validate(); err != nil {
		return nil, watcher.Permanent(fmt.Errorf("apply: target %s: %w", c.Target.ID, err))
	}
	// The Helm section is copied: the Payload is the source's.
	h := payload.Helm{}
	if rs.Helm != nil {
		h = *rs.Helm
	}
	if h.ReleaseName == "" {
		h.ReleaseName = path.Base(c.Target.ID)
	}
	rs.Helm = &h
	r, ok := s.renderers[rs.Renderer]
	if !ok {
		return nil, watcher.Permanent(fmt.Errorf("%w: target %s: no renderer %q is registered", ErrInvalidConfig, c.Target.ID, rs.Renderer))
	}
	tr, err := s.tracking(c.Target)
	if err != nil {
		return nil, err
	}
	var objs []*unstructured.Unstructured
	// From the repository only for a plain path: Paths and ignore patterns
	// narrow what FS shows, and a render reads what the target selects.
	plain := len(c.Target.Paths) == 0 && len(c.Target.Ignore) == 0 && c.Target.IgnoreFile == ""
	if rr, ok := r.(RepoRenderer); ok && c.Root != nil && plain {
		objs, res.Read, err = rr.RenderRepo(ctx, c.Root, c.Target.Path, rs)
	} else {
		objs, err = r.Render(ctx, c.FS, rs)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, watcher.Permanent(fmt.Errorf("apply: render %s (%s) at %s: %w", c.Target.ID, rs.Renderer, short(c.To), err))
	}
	return s.prepare(objs, rs, tr, res)
}

// destination is the namespace t's objects without one go to (its
// payload.Render's, defaulted); "" when its spec cannot be found.
func (s *Sink) destination(t watcher.Target) string {
	rs, err := s.spec(t)
	if err != nil {
		return ""
	}
	rs.Default()
	return rs.Namespace
}

// managedCount is how many of the objects inv records the sink manages
// (see IncludeSkip); one whose entry cannot be read counts.
func (s *Sink) managedCount(inv *inventory) int {
	n := 0
	for _, e := range inv.Entries {
		if r, err := e.ref(); err != nil || !s.cfg.outside(r.GroupKind()) {
			n++
		}
	}
	return n
}

// Remove forgets t. With Config.CascadeDelete (or CascadeDeleteFunc) it first deletes every
// object t's inventory holds and that is still t's (by its tracking label,
// or AnnotationOwner where it has one), but for those of kinds left alone
// (IncludeSkip). In ModeDryRun
// and ModeDiff it does nothing.
func (s *Sink) Remove(ctx context.Context, t watcher.Target) error {
	if s.cfg.Mode != ModeApply {
		return nil
	}
	if s.cfg.cascade() {
		inv, err := s.readInventory(ctx, t.ID)
		if err != nil {
			return err
		}
		refs, err := inv.refs()
		if err != nil {
			return err
		}
		res := &Result{Target: t.ID, Mode: s.cfg.Mode}
		refs, outside := s.managed(refs, res) // left alone, and forgotten with the inventory
		if kept := s.prune(ctx, refs, s.ownerOf(inv), res); len(kept) > 0 {
			was, left := inv.entries(), entries{}
			for _, r := range append(kept, outside...) {
				left[r.key()] = was[r.key()]
			}
			if err := s.writeInventory(ctx, inv, left.inventory(t.ID)); err != nil {
				return err
			}
			return res.err()
		}
		logr.FromContextOrDiscard(ctx).V(1).Info("removed", "target", t.ID, "result", res.String())
	}
	return s.deleteInventory(ctx, t.ID)
}

// Forget lets go of t without deleting anything: its inventory goes, its
// objects stay (the watcher calls it for a target that left its set while
// suspended, as Flux leaves a suspended Kustomization's objects when it is
// deleted). In ModeDryRun and ModeDiff it does nothing.
func (s *Sink) Forget(ctx context.Context, t watcher.Target) error {
	if s.cfg.Mode != ModeApply {
		return nil
	}
	return s.deleteInventory(ctx, t.ID)
}

// short is commit's text abbreviated.
func short(commit gitutil.Hash) string { return commit.String()[:12] }

// noForce is a client whose server-side applies do not force ownership, so
// that ssa reports conflicts instead of taking fields over.
type noForce struct{ client.Client }

func (c noForce) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	kept := make([]client.PatchOption, 0, len(opts))
	for _, o := range opts {
		if o != client.ForceOwnership {
			kept = append(kept, o)
		}
	}
	return c.Client.Patch(ctx, obj, patch, kept...)
}
