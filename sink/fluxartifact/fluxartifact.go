package fluxartifact

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
)

// Config is where the sink keeps and serves its artifacts.
type Config struct {
	// Storage is the directory the artifacts are kept in (source-controller's
	// --storage-path). It must exist.
	Storage string
	// Address is the host[:port] the artifacts' URLs name, where
	// [Sink.Handler] is served (source-controller's --storage-adv-addr), or
	// a URL prefix with its scheme ("https://host/prefix").
	Address string
	// Records is how many artifacts of an object are kept, the current one
	// included (source-controller's --artifact-retention-records); 2 when 0.
	Records int
	// TTL is how long an artifact that is not the current one may be kept
	// (--artifact-retention-ttl); 60 s when 0.
	TTL time.Duration
}

// ErrInvalidConfig is returned (wrapped) by [New] for a Config it refuses.
var ErrInvalidConfig = errors.New("fluxartifact: invalid config")

// ErrStorageInUse is returned (wrapped) by [New] when another sink, in
// this process or another, holds the storage directory: two would
// collect each other's artifacts.
var ErrStorageInUse = errors.New("fluxartifact: the storage directory is in use by another sink")

// Sink packs, stores and serves GitRepositories' artifacts, and writes
// their status.
type Sink struct {
	cfg      Config
	dyn      dynamic.Interface
	store    *storage
	failures failures
	// writes: one status write of an object at a time, so that a failure
	// observed before a delivery began is not written after it
	// (failures.delivering).
	writes keyedMutex
}

var (
	_ watcher.Sink        = (*Sink)(nil)
	_ watcher.EveryCommit = (*Sink)(nil)
	_ watcher.Inventory   = (*Sink)(nil)
	_ watcher.Forgetter   = (*Sink)(nil)
	_ watcher.Observer    = (*Sink)(nil)
	_ watcher.Runnable    = (*Sink)(nil)
)

// New returns a sink keeping its artifacts in cfg.Storage and writing the
// GitRepositories' status through dyn.
func New(dyn dynamic.Interface, cfg Config) (*Sink, error) {
	if cfg.Records == 0 {
		cfg.Records = 2
	}
	if cfg.TTL == 0 {
		cfg.TTL = time.Minute
	}
	switch {
	case cfg.Storage == "":
		return nil, fmt.Errorf("%w: Storage is required", ErrInvalidConfig)
	case !validAddress(cfg.Address):
		return nil, fmt.Errorf("%w: Address %q is not a host[:port], or an http(s) URL without a trailing slash", ErrInvalidConfig, cfg.Address)
	case cfg.Records < 1 || cfg.TTL < 0:
		return nil, fmt.Errorf("%w: Records must be at least 1 and TTL not negative", ErrInvalidConfig)
	}
	root, err := os.OpenRoot(cfg.Storage)
	if err != nil {
		return nil, fmt.Errorf("%w: Storage: %w", ErrInvalidConfig, err)
	}
	lock, err := lockStorage(cfg.Storage)
	if err != nil {
		_ = root.Close()
		return nil, err
	}
	return &Sink{cfg: cfg, dyn: dyn, store: &storage{root: root, lock: lock, records: cfg.Records, ttl: cfg.TTL}, failures: failures{wake: make(chan struct{}, 1)}}, nil
}

// Name returns "fluxartifact".
func (s *Sink) Name() string { return "fluxartifact" }

// EveryCommit is true: a GitRepository's artifact names its commit, as
// source-controller's does, so a commit that leaves what the
// GitRepository selects unchanged makes an artifact too (of the same
// digest), not a record of the watcher's alone.
func (s *Sink) EveryCommit() bool { return true }

// Handler serves the stored artifacts at their paths, as
// source-controller's storage server does.
func (s *Sink) Handler() http.Handler { return s.store.handler() }

// Close releases the storage directory and its lock.
func (s *Sink) Close() error {
	err := s.store.root.Close()
	return errors.Join(err, s.store.lock.Unlock())
}

// validAddress: a host[:port], or an http(s) URL with a host and no
// trailing slash, with nothing to escape.
func validAddress(a string) bool {
	if a == "" || strings.ContainsAny(a, " \t\r\n?#") || strings.HasSuffix(a, "/") {
		return false
	}
	scheme, rest, ok := strings.Cut(a, "://")
	if !ok {
		return !strings.Contains(a, "/")
	}
	return (scheme == "http" || scheme == "https") && rest != "" && !strings.HasPrefix(rest, "/")
}

// url is the artifact's URL, as source-controller makes it.
func (s *Sink) url(p string) string {
	if strings.HasPrefix(s.cfg.Address, "http://") || strings.HasPrefix(s.cfg.Address, "https://") {
		return s.cfg.Address + "/" + p
	}
	return "http://" + s.cfg.Address + "/" + p
}

// Deliver stores the artifact of c and writes it into its GitRepository's
// status.
func (s *Sink) Deliver(ctx context.Context, c watcher.Change) error {
	began := time.Now()
	repo, ok := payload.Of[payload.GitRepository](c.Target)
	if !ok {
		return watcher.Permanent(fmt.Errorf("fluxartifact: target %s: payload %T is not a payload.GitRepository", c.Target.ID, c.Target.Payload))
	}
	if err := repo.Validate(); err != nil {
		return watcher.Permanent(fmt.Errorf("fluxartifact: target %s: %w", c.Target.ID, err))
	}
	if repo.Generation < 1 {
		return watcher.Permanent(fmt.Errorf("fluxartifact: target %s: payload.GitRepository has no Generation (source/flux sets it)", c.Target.ID))
	}
	dir, err := objectDir(repo.Namespace, repo.Name)
	if err != nil {
		return watcher.Permanent(fmt.Errorf("fluxartifact: target %s: %w", c.Target.ID, err))
	}
	res := s.resource(repo)
	u, err := res.Get(ctx, repo.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("fluxartifact: GitRepository %s: %w", repo.Key(), err)
	}
	if err := s.current(u, repo); err != nil {
		return err
	}
	file := c.To.String() + ".tar.gz"
	fsys := c.FS
	if len(repo.Includes) > 0 {
		withIncludes, done, err := s.withIncludes(ctx, c, repo)
		if err != nil {
			return s.includeFailed(ctx, repo, err)
		}
		defer done()
		fsys = withIncludes
	}
	a, err := s.store.store(ctx, dir, file, fsys)
	if errors.Is(err, fs.ErrInvalid) {
		// A name the tree lists but cannot be opened by (not UTF-8): this
		// commit has no artifact; the next one is tried.
		return watcher.Permanent(fmt.Errorf("fluxartifact: GitRepository %s: the tree at %s cannot be archived: %w", repo.Key(), c.To, err))
	}
	if err != nil {
		return fmt.Errorf("fluxartifact: GitRepository %s: storing the artifact: %w", repo.Key(), err)
	}
	st := statusOf(a, s.url(a.Path), revision(u, c.Ref, c.To), metav1.NewTime(time.Now().UTC()))
	st.requested, st.verify, st.verified = repo.RequestedAt, c.Target.Verify, c.Verified
	for _, inc := range repo.Includes {
		st.included = append(st.included, inc.Artifact)
	}
	if err := s.writeStatus(ctx, res, u, repo, st, began); err != nil {
		return err
	}
	if err := s.store.collect(dir, file, time.Now()); err != nil {
		return fmt.Errorf("fluxartifact: GitRepository %s: collecting old artifacts: %w", repo.Key(), err)
	}
	return nil
}

// writeStatus writes st into the status of u, the target's object (read
// again on a conflict), as the object's only status writer meanwhile.
// A failure observed before the delivery began (at began) is not written
// after it.
func (s *Sink) writeStatus(ctx context.Context, res dynamic.ResourceInterface, u *unstructured.Unstructured, repo payload.GitRepository, st status, began time.Time) error {
	unlock, err := s.writes.lockCtx(ctx, repo.Key())
	if err != nil {
		return fmt.Errorf("fluxartifact: GitRepository %s: waiting to write its status: %w", repo.Key(), err)
	}
	defer unlock()
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := s.current(u, repo); err != nil {
			return err
		}
		try := st
		try.artifact = maps.Clone(st.artifact)
		setStatus(u, try)
		_, err := res.UpdateStatus(ctx, u, metav1.UpdateOptions{FieldManager: "modwatch-fluxartifact"})
		if apierrors.IsConflict(err) {
			if fresh, gerr := res.Get(ctx, repo.Name, metav1.GetOptions{}); gerr == nil {
				u = fresh
			}
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("fluxartifact: GitRepository %s: writing its status: %w", repo.Key(), err)
	}
	s.failures.delivery(repo.Key(), began)
	return nil
}

// current fails unless u is the target's GitRepository at the generation
// the target was made from.
func (s *Sink) current(u *unstructured.Unstructured, repo payload.GitRepository) error {
	if string(u.GetUID()) != repo.UID {
		return watcher.Permanent(fmt.Errorf("fluxartifact: GitRepository %s is another object (uid %s, the target's %s)", repo.Key(), u.GetUID(), repo.UID))
	}
	if u.GetGeneration() != repo.Generation {
		return fmt.Errorf("fluxartifact: GitRepository %s is at generation %d, its target was made from %d: the new target is delivered instead", repo.Key(), u.GetGeneration(), repo.Generation)
	}
	return nil
}

func (s *Sink) resource(repo payload.GitRepository) dynamic.ResourceInterface {
	gv, _ := schema.ParseGroupVersion(repo.APIVersion)
	return s.dyn.Resource(gv.WithResource("gitrepositories")).Namespace(repo.Namespace)
}

// targetPrefix begins the IDs of source/flux's targets:
// "flux/<namespace>/<name>".
const targetPrefix = "flux/"

// Remove removes the target's artifacts from the storage, found by its
// ID (a target of source/flux's). The GitRepository's status is left as it
// is (the object is gone, or no longer watched). When the object is being
// deleted and holds source-controller's finalizer (it served the object
// before this program), the finalizer is removed once the artifacts are,
// as source-controller's deletion does: the object goes.
func (s *Sink) Remove(ctx context.Context, t watcher.Target) error {
	rest, ok := strings.CutPrefix(t.ID, targetPrefix)
	ns, name, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 {
		return nil // not a GitRepository's: nothing of it stored
	}
	dir, err := objectDir(ns, name)
	if err != nil {
		return nil // not a name an object can have: nothing stored
	}
	if err := s.store.removeAll(dir); err != nil {
		return err
	}
	s.failures.forget(ns + "/" + name)
	return s.releaseFinalizer(ctx, t, ns, name)
}

// Finalizer is source-controller's finalizer (fluxcd/pkg/apis/meta's
// SourceFinalizer), which it puts on every GitRepository it serves.
const Finalizer = "finalizers.fluxcd.io"

// releaseFinalizer removes [Finalizer] from the GitRepository ns/name if
// it is being deleted and is the object this sink served: the target's
// (its UID) or, for a target known by its ID alone (the sweep of
// GitRepositories deleted while the program was stopped), one whose
// artifact is this sink's (its URL). Other finalizers stay.
func (s *Sink) releaseFinalizer(ctx context.Context, t watcher.Target, ns, name string) error {
	repo, _ := payload.Of[payload.GitRepository](t)
	versions := []string{repo.APIVersion}
	if repo.APIVersion == "" {
		versions = []string{"source.toolkit.fluxcd.io/v1", "source.toolkit.fluxcd.io/v1beta2"} // Flux's, preferred first
	}
	var err error
	for _, v := range versions {
		repo.APIVersion, repo.Namespace, repo.Name = v, ns, name
		if err = s.release(ctx, repo); !apierrors.IsNotFound(err) {
			break
		}
	}
	if apierrors.IsNotFound(err) {
		return nil // gone (or no version of it served)
	}
	if err != nil {
		return fmt.Errorf("fluxartifact: GitRepository %s/%s: removing Flux's finalizer: %w", ns, name, err)
	}
	return nil
}

// release is releaseFinalizer for the object repo names at its version.
func (s *Sink) release(ctx context.Context, repo payload.GitRepository) error {
	res := s.resource(repo)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u, err := res.Get(ctx, repo.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		fin := u.GetFinalizers()
		if u.GetDeletionTimestamp() == nil || !slices.Contains(fin, Finalizer) || !s.served(u, repo.UID) {
			return nil // not being deleted, not held by Flux, or not this sink's
		}
		u.SetFinalizers(slices.DeleteFunc(slices.Clone(fin), func(f string) bool { return f == Finalizer }))
		_, err = res.Update(ctx, u, metav1.UpdateOptions{FieldManager: "modwatch-fluxartifact"})
		return err
	})
}

// served reports whether u is the object this sink served: of uid when it
// is known, else one whose artifact's URL is this sink's.
func (s *Sink) served(u *unstructured.Unstructured, uid string) bool {
	if uid != "" {
		return string(u.GetUID()) == uid
	}
	url, _, _ := unstructured.NestedString(u.Object, "status", "artifact", "url")
	return strings.HasPrefix(url, s.url(""))
}

// Forget removes the target's artifacts too: a suspended GitRepository
// that is deleted takes its artifacts with it, as source-controller's
// finalizer does.
func (s *Sink) Forget(ctx context.Context, t watcher.Target) error { return s.Remove(ctx, t) }

// Targets lists the targets the storage holds artifacts for, so that the
// artifacts of a GitRepository deleted while the program was stopped go
// once every source has given its set.
func (s *Sink) Targets(context.Context) ([]string, error) {
	objs, err := s.store.objects()
	if err != nil {
		return nil, fmt.Errorf("fluxartifact: listing the storage: %w", err)
	}
	ids := make([]string, len(objs))
	for i, o := range objs {
		ids[i] = targetPrefix + o
	}
	return ids, nil
}

// revision is the artifact's revision as source-controller writes it:
// "<branch or tag>@sha1:<commit>", the full ref name when spec.ref.name
// is set, and "sha1:<commit>" for a commit alone; a commit pinned with a
// name or a branch keeps it ("refs/heads/main@sha1:…", "main@sha1:…").
func revision(u *unstructured.Unstructured, ref string, commit gitutil.Hash) string {
	digest := "sha1:" + commit.String()
	spec, _, _ := unstructured.NestedStringMap(u.Object, "spec", "ref")
	if spec["commit"] != "" && ref == "" {
		switch {
		case spec["name"] != "":
			ref = spec["name"]
		case spec["branch"] != "":
			ref = "refs/heads/" + spec["branch"]
		}
	}
	if spec["name"] != "" && ref != "" {
		return ref + "@" + digest
	}
	if parts := strings.SplitN(ref, "/", 3); len(parts) == 3 {
		return parts[2] + "@" + digest
	}
	return digest
}
