package gitsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/modwatch/modwatch/internal/backoff"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
)

// GVR is the GitSync resource.
var GVR = schema.GroupVersionResource{Group: "numaplane.numaproj.io", Version: "v1alpha1", Resource: "gitsyncs"}

// Config says which GitSyncs are watched and how their statuses are
// written. The zero Config watches every namespace and writes the whole
// status.
type Config struct {
	// Namespace is the namespace watched; "" watches all.
	Namespace string
	// Settings are what a reloaded controller configuration changes while
	// the source runs ([Source.SetSettings]).
	Settings
	// Credentials, when set, has Run watch the Secrets they read, so that
	// a rotated Secret is used at once (the watcher resolves credentials
	// again when the source hands it its set). Default: none; the refresh
	// interval alone picks a rotation up.
	Credentials *Credentials
	// RefreshInterval is how often the target set is handed to the
	// watcher again although no GitSync changed, so that credentials read
	// from Secrets are resolved again (a rotated Secret is used within
	// it). 0: 1m; negative: never.
	RefreshInterval time.Duration
	// StatusFields says which fields of the status the source writes:
	// [StatusAll] (default), [StatusCommit] for a program whose own
	// reconciler writes phase, message and conditions (Numaplane's), or
	// [StatusNone].
	StatusFields StatusFields
	// StatusWriter writes the statuses. Default: [ApplyStatus] through
	// the source's client, as FieldManager.
	StatusWriter StatusWriter
	// FieldManager is the field manager the statuses are written as: the
	// one whose fields, in a GitSync's metadata.managedFields, are the
	// source's own; every other manager's are left to it
	// ([ForeignFields]). A custom StatusWriter writes as it. Default: the
	// FieldManager of an [ApplyStatus] given as StatusWriter, else
	// [DefaultFieldManager].
	FieldManager string
	// TakeOver names field managers whose status fields are the source's
	// to take: the names the program wrote the status under before (a
	// Numaplane controller before its port updated it as its binary's
	// name). Their fields are not foreign: the source writes them, by a
	// forced apply on the version of the GitSync it read (a write in
	// between is a conflict, tried again), so that no other manager's
	// field is taken. Without it, a status written by the program's
	// previous self stays that self's, unchanged. Default: none.
	TakeOver []string
	// StatusTimeout bounds each status write. Default 30s.
	StatusTimeout time.Duration
	// Accept, when set, gives the embedding program the say on which
	// GitSyncs are watched: it is called with each valid GitSync for this
	// cluster (its metadata, and its spec as the source parsed it), and
	// one it refuses (a non-nil error) never becomes a target. With
	// StatusAll its status says Failed with the error; with StatusCommit
	// the source writes nothing for it (the program's reconciler does).
	// Default: every valid GitSync is.
	Accept func(obj metav1.Object, gs payload.GitSync) error
}

// Settings are the part of a Config that a controller configuration file
// says, and that changes when it is reloaded.
type Settings struct {
	// ClusterName is this cluster's name: a GitSync whose
	// destination.cluster differs is NotApplicable. "" accepts every
	// GitSync.
	ClusterName string
	// Interval is the poll interval of the targets; 0 leaves the watcher's.
	Interval time.Duration
	// Suspend suspends every target (Numaplane's automatedSyncDisabled):
	// polled, not delivered, until it is false again (see
	// [watcher.Target.Suspend]).
	Suspend bool
}

// Source watches GitSyncs.
type Source struct {
	dyn      dynamic.Interface
	cfg      Config // defaulted; its Settings are the first
	settings atomic.Pointer[Settings]
	log      logr.Logger
	dirty    chan struct{}

	mu      sync.Mutex
	pending map[string][]mutation // status mutations by "namespace/name"
	wake    chan struct{}
	store   cache.Store // the informer's, once Run has started
	written map[string]written
}

// written is the last status written for a GitSync (the fields the source
// owns, but other managers'), so that a cache that has not caught up with
// it is not taken for the truth; with the fields left to other managers
// (those a conflict named included) and the version of the GitSync the
// write was decided on.
type written struct {
	uid     types.UID
	status  Status
	foreign ForeignFields
	read    string // resourceVersion
}

var _ watcher.Source = (*Source)(nil)

// New returns a source of the GitSyncs dyn reaches.
func New(dyn dynamic.Interface, cfg Config) *Source {
	if cfg.RefreshInterval == 0 {
		cfg.RefreshInterval = time.Minute
	}
	if cfg.StatusTimeout == 0 {
		cfg.StatusTimeout = 30 * time.Second
	}
	if cfg.FieldManager == "" {
		cfg.FieldManager = DefaultFieldManager
		if a, ok := cfg.StatusWriter.(ApplyStatus); ok && a.FieldManager != "" {
			cfg.FieldManager = a.FieldManager
		}
	}
	if cfg.StatusWriter == nil {
		cfg.StatusWriter = ApplyStatus{Client: dyn, FieldManager: cfg.FieldManager}
	}
	s := &Source{
		dyn: dyn, cfg: cfg, log: logr.Discard(),
		dirty: make(chan struct{}, 1), wake: make(chan struct{}, 1),
		pending: map[string][]mutation{}, written: map[string]written{},
	}
	s.settings.Store(&cfg.Settings)
	return s
}

// SetSettings changes the cluster name, interval and suspension (a
// reloaded controller configuration); the rest of the Config stays as New
// had it.
func (s *Source) SetSettings(st Settings) {
	s.settings.Store(&st)
	s.Refresh()
}

// Refresh hands the watcher the target set again, so that it resolves the
// targets' credentials again (a rotated Secret).
func (s *Source) Refresh() { poke(s.dirty) }

func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Run watches the GitSyncs until ctx is done, and writes their statuses.
// It logs to the logger of ctx.
func (s *Source) Run(ctx context.Context, update func([]watcher.Target)) error {
	s.log = logr.FromContextOrDiscard(ctx)
	factory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(s.dyn, 0, s.cfg.Namespace, nil)
	inf := factory.ForResource(GVR).Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.Refresh() },
		UpdateFunc: func(old, cur any) { s.changed(old, cur) },
		DeleteFunc: func(any) { s.Refresh() },
	}); err != nil {
		return fmt.Errorf("gitsync: %w", err)
	}
	synced, err := reportListErrors(ctx, inf)
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil
	}
	synced.Store(true)
	s.mu.Lock()
	s.store = inf.GetStore()
	s.mu.Unlock()
	s.Refresh() // the first set, even when there is no GitSync

	done := make(chan struct{})
	go func() {
		defer close(done)
		s.writeStatuses(ctx)
	}()
	defer func() { <-done }()
	if s.cfg.Credentials != nil {
		ctx, cancel := context.WithCancel(ctx)
		watched := make(chan error, 1)
		go func() { watched <- s.cfg.Credentials.Watch(ctx, s.Refresh) }()
		defer func() {
			cancel()
			if err := <-watched; err != nil {
				s.log.Error(err, "watching credential Secrets")
			}
		}()
	}
	var tick <-chan time.Time
	if s.cfg.RefreshInterval > 0 {
		ticker := time.NewTicker(s.cfg.RefreshInterval)
		defer ticker.Stop()
		tick = ticker.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
		case <-s.dirty:
		}
		update(s.targets(inf.GetStore().List()))
	}
}

// reportListErrors makes a list of inf that fails before the first set
// (forbidden, the CRD absent) no set: the watcher is told, through ctx,
// and removes nothing. After it, the informer keeps the set it has while
// it lists again. Set synced once the first list is in.
func reportListErrors(ctx context.Context, inf cache.SharedIndexInformer) (synced *atomic.Bool, err error) {
	synced = &atomic.Bool{}
	err = inf.SetWatchErrorHandlerWithContext(func(hctx context.Context, r *cache.Reflector, err error) {
		cache.DefaultWatchErrorHandler(hctx, r, err)
		if !synced.Load() {
			watcher.NoSet(ctx, fmt.Errorf("gitsync: listing GitSyncs: %w", err))
		}
	})
	if err != nil {
		return nil, fmt.Errorf("gitsync: %w", err)
	}
	return synced, nil
}

// changed refreshes the set when a GitSync's spec or metadata changed, not
// when only its status did (our own writes).
func (s *Source) changed(old, cur any) {
	o, ok1 := old.(*unstructured.Unstructured)
	c, ok2 := cur.(*unstructured.Unstructured)
	if ok1 && ok2 && o.GetGeneration() == c.GetGeneration() && o.GetDeletionTimestamp().Equal(c.GetDeletionTimestamp()) {
		return
	}
	s.Refresh()
}

// targets turns the GitSyncs into targets, and marks the ones that are not.
func (s *Source) targets(objs []any) []watcher.Target {
	cfg := s.settings.Load()
	var out []watcher.Target
	for _, o := range objs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok || u.GetDeletionTimestamp() != nil {
			continue
		}
		key, gen := u.GetNamespace()+"/"+u.GetName(), u.GetGeneration()
		t, gs, err := target(u, cfg.Interval)
		t.Suspend = cfg.Suspend
		// A GitSync that is named is wanted, whatever else is true of it:
		// one that cannot be watched (invalid, for another cluster,
		// refused) is in the set as NotWatched, so that what was applied
		// for it stays. Only its deletion removes it.
		id := TargetID(u.GetNamespace(), u.GetName())
		switch {
		case err != nil:
			s.enqueue(key, invalid(gen, err))
			s.log.Info("invalid GitSync", "gitsync", key, "error", err.Error())
			out = append(out, watcher.NotWatched(id, err))
		case cfg.ClusterName != "" && t.Payload.(payload.Render).Cluster != cfg.ClusterName:
			why := fmt.Sprintf("destination cluster %q is not this cluster (%q)", t.Payload.(payload.Render).Cluster, cfg.ClusterName)
			s.enqueue(key, notApplicable(gen, why))
			out = append(out, watcher.NotWatched(id, errors.New(why)))
		default:
			if s.cfg.Accept != nil {
				if err := s.cfg.Accept(u, gs); err != nil {
					s.enqueue(key, refused(gen, "Refused", err))
					s.log.V(1).Info("GitSync refused by the program", "gitsync", key, "error", err.Error())
					out = append(out, watcher.NotWatched(id, err))
					continue
				}
			}
			s.enqueue(key, accepted(gen))
			out = append(out, t)
		}
	}
	return out
}

// target reads one GitSync: its target, and its spec.
func target(u *unstructured.Unstructured, interval time.Duration) (watcher.Target, payload.GitSync, error) {
	var gs payload.GitSync
	raw, _ := u.Object["spec"].(map[string]any)
	data, err := json.Marshal(raw)
	if err == nil {
		err = json.Unmarshal(data, &gs)
	}
	if err != nil {
		return watcher.Target{}, gs, fmt.Errorf("%w: %w", payload.ErrInvalid, err)
	}
	if gs.TargetRevision == "" {
		return watcher.Target{}, gs, fmt.Errorf("%w: targetRevision is empty", payload.ErrInvalid)
	}
	t, err := gs.Target(TargetID(u.GetNamespace(), u.GetName()), interval)
	if err != nil {
		return watcher.Target{}, gs, err
	}
	r := t.Payload.(payload.Render)
	r.Generation = u.GetGeneration()
	t.Payload = r
	return t, gs, nil
}

// Observer returns the observer that writes the watcher's outcomes into
// the GitSyncs' statuses; the writes are made by Run.
func (s *Source) Observer() watcher.Observer {
	return watcher.ObserverFunc(func(e watcher.Event) {
		if e.Target == nil {
			return
		}
		ns, name, ok := ParseTargetID(e.Target.ID)
		if !ok {
			return
		}
		if m, ok := eventMutation(e); ok {
			s.enqueue(ns+"/"+name, m)
		}
	})
}

func (s *Source) enqueue(key string, m mutation) {
	s.mu.Lock()
	s.pending[key] = append(s.pending[key], m)
	s.mu.Unlock()
	poke(s.wake)
}

// writeStatuses applies the pending mutations until ctx is done; a failed
// write is tried again with backoff.
func (s *Source) writeStatuses(ctx context.Context) {
	attempt := 0
	retry := time.NewTimer(0)
	retry.Stop()
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-retry.C:
		}
		s.mu.Lock()
		batch := s.pending
		s.pending = map[string][]mutation{}
		s.mu.Unlock()
		failed := false
		for key, ms := range batch {
			if err := s.writeStatus(ctx, key, ms); err != nil {
				if ctx.Err() != nil {
					return
				}
				s.log.Error(err, "status not written", "gitsync", key)
				s.mu.Lock()
				s.pending[key] = append(ms, s.pending[key]...)
				s.mu.Unlock()
				failed = true
			}
		}
		if failed {
			attempt++
			retry.Reset(backoff.Delay(attempt, 500*time.Millisecond, 30*time.Second))
		} else {
			attempt = 0
		}
	}
}

// writeStatus applies ms to the GitSync's status and writes the fields the
// source owns if they changed, but none another field manager owns (see
// [ForeignFields]). A GitSync that is gone needs no status.
func (s *Source) writeStatus(ctx context.Context, key string, ms []mutation) error {
	obj, last, err := s.cached(key)
	if err != nil || obj == nil || s.cfg.StatusFields == StatusNone {
		return err
	}
	foreign := s.foreign(obj, last)
	cur, err := decodeStatus(obj.Object)
	if err != nil {
		cur = Status{} // unreadable: rewritten whole
	}
	before := s.cfg.StatusFields.owned(cur)
	if last != nil {
		before = last.status // the cache may not have caught up with it
	}
	after := foreign.overlay(copyStatus(before), cur)
	now := time.Now()
	for _, m := range ms {
		m(&after, now)
	}
	after = s.cfg.StatusFields.owned(after)
	if sameStatus(foreign.keep(before), foreign.keep(after)) {
		return nil
	}
	sent, foreign, err := s.send(ctx, obj, after, foreign)
	if err != nil {
		return fmt.Errorf("gitsync: write status of %s: %w", key, err)
	}
	s.mu.Lock()
	s.written[key] = written{uid: obj.GetUID(), status: sent, foreign: foreign, read: obj.GetResourceVersion()}
	s.mu.Unlock()
	return nil
}

// cached returns the GitSync key as the cache has it (nil: gone) and what
// the source last wrote of it (nil: nothing yet, or of another GitSync of
// that name, since deleted).
func (s *Source) cached(key string) (*unstructured.Unstructured, *written, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	item, exists, err := s.store.GetByKey(key)
	if err != nil {
		return nil, nil, err
	}
	if !exists {
		delete(s.written, key)
		return nil, nil, nil
	}
	obj := item.(*unstructured.Unstructured)
	if last, ok := s.written[key]; ok && last.uid == obj.GetUID() {
		return obj, &last, nil
	}
	return obj, nil, nil
}

// foreign returns the fields of obj's status that other managers own, as
// its managedFields say; while the cache holds the version the last write
// was decided on, or no managedFields the source can read, with those the
// conflicts of that write named.
func (s *Source) foreign(obj *unstructured.Unstructured, last *written) ForeignFields {
	foreign, err := foreignFields(obj, s.cfg.FieldManager, s.cfg.TakeOver)
	if err != nil {
		// Not forced, a write of a field another owns is refused, and the
		// conflict names it (send).
		s.log.V(1).Info("managedFields unreadable", "gitsync", obj.GetNamespace()+"/"+obj.GetName(), "error", err.Error())
	}
	if last != nil && (obj.GetResourceVersion() == last.read || len(obj.GetManagedFields()) == 0 || err != nil) {
		foreign = foreign.union(last.foreign)
	}
	return foreign
}

// send writes st but its foreign fields, each attempt within its own
// timeout, and returns what it wrote and the fields it left out. A
// conflict, with a manager whose write the cache did not show yet, has the
// fields it names left to that manager and the rest written, once; a
// second conflict is an error (the write is tried again later).
func (s *Source) send(ctx context.Context, obj *unstructured.Unstructured, st Status, foreign ForeignFields) (Status, ForeignFields, error) {
	for retried := false; ; retried = true {
		actx, cancel := context.WithTimeout(ctx, s.cfg.StatusTimeout)
		err := s.cfg.StatusWriter.WriteStatus(actx, obj.GetNamespace(), obj.GetName(), st, foreign)
		cancel()
		if err == nil {
			return foreign.keep(st), foreign, nil
		}
		more, conflict := foreign.with(err, st)
		if !conflict || retried {
			return Status{}, foreign, err
		}
		s.log.V(1).Info("status fields left to another field manager", "gitsync", obj.GetNamespace()+"/"+obj.GetName(), "conflict", err.Error())
		foreign = more
	}
}

// copyStatus copies s deeply enough for mutations.
func copyStatus(s Status) Status {
	s.Conditions = append([]metav1.Condition(nil), s.Conditions...)
	if s.CommitStatus != nil {
		cs := *s.CommitStatus
		s.CommitStatus = &cs
	}
	return s
}

// StatusWriter writes the fields of a GitSync's status that the source
// owns (see [StatusFields]): s holds those, and only those, but a writer
// leaves out the ones in foreign, which another field manager owns
// ([ForeignFields.Strip] gives s without them, in the form to send), and
// takes no field over: a server-side apply as [Config.FieldManager],
// without Force, unless [ForeignFields.TakeOver] says to force, on the
// resourceVersion it gives (fields of [Config.TakeOver]'s managers; a
// writer that never forces leaves those to them). It returns the
// apiserver's error as it is (wrapped with %w at most): on an apply
// conflict, the source leaves the fields it names out too and calls
// WriteStatus once more.
type StatusWriter interface {
	WriteStatus(ctx context.Context, namespace, name string, s Status, foreign ForeignFields) error
}

// StatusWriterFunc adapts a function to [StatusWriter].
type StatusWriterFunc func(ctx context.Context, namespace, name string, s Status, foreign ForeignFields) error

// WriteStatus implements StatusWriter.
func (f StatusWriterFunc) WriteStatus(ctx context.Context, namespace, name string, s Status, foreign ForeignFields) error {
	return f(ctx, namespace, name, s, foreign)
}

// DefaultFieldManager is the field manager of [ApplyStatus] in a source
// made by [New].
const DefaultFieldManager = "modwatch-gitsync"

// ApplyStatus is the default [StatusWriter]: a server-side apply of the
// status subresource as FieldManager, without Force. The fields it sends
// are the source's but the foreign ones; every other field of the status
// stays whoever's it is, untouched, and one another manager took since
// the source read the GitSync is refused with a conflict, not taken over.
type ApplyStatus struct {
	Client       dynamic.Interface
	FieldManager string
}

var _ StatusWriter = ApplyStatus{}

// WriteStatus implements StatusWriter. A GitSync that is gone is no error.
func (a ApplyStatus) WriteStatus(ctx context.Context, namespace, name string, s Status, foreign ForeignFields) error {
	status, err := foreign.Strip(s)
	if err != nil {
		return err
	}
	meta := map[string]any{"name": name, "namespace": namespace}
	rv, force := foreign.TakeOver(s)
	if force {
		meta["resourceVersion"] = rv // nothing taken but what was read
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": GVR.GroupVersion().String(), "kind": "GitSync", "metadata": meta, "status": status,
	}}
	_, err = a.Client.Resource(GVR).Namespace(namespace).ApplyStatus(ctx, name, u, metav1.ApplyOptions{FieldManager: a.FieldManager, Force: force})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
