package flux

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/Masterminds/semver/v3"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/githubapp"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
)

// Group is Flux's source API group.
const Group = "source.toolkit.fluxcd.io"

// versions are the GitRepository versions understood, preferred first.
var versions = []string{"v1", "v1beta2"}

// Config says which GitRepositories are watched.
type Config struct {
	// Namespace is the namespace watched; "" watches all.
	Namespace string
	// Hosts, when set, limits the watch to GitRepositories whose URL's host
	// is one of these ("gitlab.example.com", or "host:port").
	Hosts []string
	// CRDCheckInterval is how often to look for the GitRepository CRD while
	// it is not installed. Default 30s.
	CRDCheckInterval time.Duration
	// RefreshInterval is how often the targets are handed to the watcher
	// again although nothing changed, so that credentials read from Secrets
	// are read again. 0 turns it off. Default 1m.
	RefreshInterval time.Duration
	// Artifacts makes the targets of a program that serves the
	// GitRepositories' artifacts in source-controller's place
	// (sink/fluxartifact), rather than one that notifies Flux: each target
	// is polled at its spec.interval, a GitRepository pinned to a commit is
	// a target of that commit, its spec.timeout bounds its remote's git
	// requests (watcher.Target.Timeout), its spec.include is handed in its
	// payload with the artifacts it includes (payload.GitRepositoryInclude;
	// a new artifact included is a new set of targets), and what such a
	// program does not serve makes the GitRepository not watched, by name
	// and on its status (watcher.Refused); a reconcile request
	// (AnnotationRequestedAt) is handed in the target's payload, for the
	// sink to acknowledge.
	Artifacts bool
}

// Source watches GitRepositories.
type Source struct {
	kube    kubernetes.Interface
	dyn     dynamic.Interface
	cfg     Config
	log     logr.Logger
	timeout time.Duration
	dirty   chan struct{}

	// included are the GitRepositories others include (Config.Artifacts).
	included included
	// store is the informer's, read by the goroutine that builds
	// targets: what an included GitRepository is now.
	store cache.Store

	// apps are the GitHub App resolvers of `provider: github`, by Secret,
	// kept while the Secret is unchanged so that a token lives its hour;
	// only the goroutine that builds targets touches it.
	apps map[string]githubApp
}

// githubApp is a resolver made from one version of a Secret.
type githubApp struct {
	version string
	r       *githubapp.Resolver
}

var _ watcher.Source = (*Source)(nil)

// New returns a source of the GitRepositories kube and dyn reach (kube
// reads Secrets and discovers the served version), configured by cfg
// alone.
func New(kube kubernetes.Interface, dyn dynamic.Interface, cfg Config) *Source {
	if cfg.CRDCheckInterval == 0 {
		cfg.CRDCheckInterval = 30 * time.Second
	}
	return &Source{kube: kube, dyn: dyn, cfg: cfg, log: logr.Discard(), timeout: 30 * time.Second, dirty: make(chan struct{}, 1), apps: map[string]githubApp{}}
}

// Run watches GitRepositories until ctx is done.
func (s *Source) Run(ctx context.Context, update func([]watcher.Target)) error {
	s.log = logr.FromContextOrDiscard(ctx)
	said := false
	for {
		gvr, err := s.served(ctx)
		if err == nil {
			if err := s.watch(ctx, gvr, update); !errors.Is(err, errGone) {
				return err
			}
			s.log.Info("Flux GitRepository API no longer served")
			said = false
			continue
		}
		switch {
		case errors.Is(err, errNotServed) && !said:
			// The apiserver says it serves no GitRepository: there is none,
			// an authoritative empty set.
			s.log.Info("Flux GitRepository API not served; looking again periodically", "reason", err.Error())
			update([]watcher.Target{})
			said = true
		case !errors.Is(err, errNotServed):
			// Discovery could not tell: no set, never an empty one.
			watcher.NoSet(ctx, err)
		}
		timer := time.NewTimer(s.cfg.CRDCheckInterval)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C:
		}
	}
}

// served finds the GitRepository version the apiserver serves.
// It fails with errNotServed when discovery answered for every version
// that it is not served, with another error when it could not tell.
func (s *Source) served(ctx context.Context) (schema.GroupVersionResource, error) {
	var failed error
	for _, v := range versions {
		gvr := schema.GroupVersionResource{Group: Group, Version: v, Resource: "gitrepositories"}
		if ok, err := s.serves(gvr); ok {
			return gvr, nil
		} else if ctx.Err() != nil {
			return schema.GroupVersionResource{}, ctx.Err()
		} else if err != nil {
			s.log.V(1).Info("discovery", "groupVersion", gvr.GroupVersion().String(), "error", err.Error())
			failed = fmt.Errorf("flux: discovery of %s: %w", gvr.GroupVersion(), err)
		}
	}
	if failed != nil {
		return schema.GroupVersionResource{}, failed
	}
	return schema.GroupVersionResource{}, fmt.Errorf("%w: gitrepositories.%s among %v", errNotServed, Group, versions)
}

// errNotServed: discovery answered that no version is served.
var errNotServed = errors.New("flux: no served version")

// serves asks discovery whether gvr is served: false with no error when it
// is not, an error when discovery could not tell.
func (s *Source) serves(gvr schema.GroupVersionResource) (bool, error) {
	list, err := s.kube.Discovery().ServerResourcesForGroupVersion(gvr.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, r := range list.APIResources {
		if r.Name == gvr.Resource {
			return true, nil
		}
	}
	return false, nil
}

// errGone: the watched version is no longer served, or the informer broke.
var errGone = errors.New("flux: GitRepository API gone")

// watch runs an informer over gvr until ctx is done, or until gvr is no
// longer served (errGone).
func (s *Source) watch(ctx context.Context, gvr schema.GroupVersionResource, update func([]watcher.Target)) error {
	factory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(s.dyn, 0, s.cfg.Namespace, nil)
	inf := factory.ForResource(gvr).Informer()
	broken, err := s.handle(ctx, inf)
	if err != nil {
		return err
	}
	s.store = inf.GetStore()
	ctx, cancel := context.WithCancel(ctx)
	factory.Start(ctx.Done())
	defer func() {
		cancel() // before Shutdown, which waits for the informers to stop
		factory.Shutdown()
	}()
	check := time.NewTicker(s.cfg.CRDCheckInterval)
	defer check.Stop()
	if err := s.waitSynced(ctx, gvr, inf, broken); err != nil || ctx.Err() != nil {
		return err
	}
	s.log.Info("watching Flux GitRepositories", "version", gvr.Version)
	s.poke()
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
		case <-check.C:
			if !s.stillServed(gvr) {
				return errGone
			}
			continue
		case <-broken:
			return errGone
		case <-tick:
		case <-s.dirty:
		}
		update(s.targets(ctx, gvr, inf.GetStore().List()))
	}
}

// poke asks for a new set of targets (at most one pending).
func (s *Source) poke() {
	select {
	case s.dirty <- struct{}{}:
	default:
	}
}

// handle makes inf's events poke, and returns a channel that receives when
// its list or watch breaks (the CRD deleted, perhaps re-created at once):
// that ends the informer, and a new one relists at once instead of backing
// off. A list that fails before the first set (forbidden, say) is no set:
// the watcher is told, through the ctx of Run.
func (s *Source) handle(ctx context.Context, inf cache.SharedIndexInformer) (<-chan struct{}, error) {
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.poke() },
		UpdateFunc: func(old, cur any) { s.changed(old, cur) },
		DeleteFunc: func(any) { s.poke() },
	}); err != nil {
		return nil, fmt.Errorf("flux: %w", err)
	}
	broken := make(chan struct{}, 1)
	if err := inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		if !inf.HasSynced() {
			watcher.NoSet(ctx, fmt.Errorf("flux: listing GitRepositories: %w", err))
		}
		select {
		case broken <- struct{}{}:
		default:
		}
	}); err != nil {
		return nil, fmt.Errorf("flux: %w", err)
	}
	return broken, nil
}

// waitSynced waits for inf's cache, but not forever if gvr went away
// meanwhile (errGone); nil when synced or ctx ends.
func (s *Source) waitSynced(ctx context.Context, gvr schema.GroupVersionResource, inf cache.SharedIndexInformer, broken <-chan struct{}) error {
	for {
		sctx, scancel := context.WithTimeout(ctx, s.cfg.CRDCheckInterval)
		synced := cache.WaitForCacheSync(sctx.Done(), inf.HasSynced)
		scancel()
		if ctx.Err() != nil {
			return nil
		}
		if !synced && !s.stillServed(gvr) {
			return errGone
		}
		select {
		case <-broken:
			return errGone
		default:
		}
		if synced {
			return nil
		}
	}
}

// stillServed reports whether gvr is still served (true when discovery
// cannot tell, so that an apiserver hiccup does not stop the watch).
func (s *Source) stillServed(gvr schema.GroupVersionResource) bool {
	ok, err := s.serves(gvr)
	return ok || err != nil
}

// AnnotationRequestedAt is Flux's reconcile request annotation (`flux
// reconcile source git`): with Config.Artifacts, a new value is handed in
// the target's payload (payload.GitRepository.RequestedAt).
const AnnotationRequestedAt = "reconcile.fluxcd.io/requestedAt"

// changed pokes when a GitRepository's spec changed, not its status
// (Flux writes that at every reconciliation), or, with Config.Artifacts,
// when a reconciliation was requested.
func (s *Source) changed(old, cur any) {
	o, ok1 := old.(*unstructured.Unstructured)
	c, ok2 := cur.(*unstructured.Unstructured)
	if ok1 && ok2 && o.GetGeneration() == c.GetGeneration() && o.GetUID() == c.GetUID() &&
		(!s.cfg.Artifacts || o.GetAnnotations()[AnnotationRequestedAt] == c.GetAnnotations()[AnnotationRequestedAt] &&
			!s.newArtifactIncluded(o, c)) {
		return
	}
	s.poke()
}

// targets turns the GitRepositories into targets.
func (s *Source) targets(ctx context.Context, gvr schema.GroupVersionResource, objs []any) []watcher.Target {
	var out []watcher.Target
	used := map[string]bool{}
	byKey, cycles := s.includeIndex(objs)
	defer func() {
		for k := range s.apps {
			if !used[k] {
				delete(s.apps, k) // its GitRepositories are gone
			}
		}
	}()
	for _, o := range objs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok || u.GetDeletionTimestamp() != nil {
			continue
		}
		t, err := s.target(ctx, gvr, u, used, byKey, cycles)
		if err != nil {
			// Named, so wanted: what its sinks did for it stays. Its
			// payload goes with it, for a sink to say why on the object.
			s.log.Info("GitRepository not watched", "gitrepository", u.GetNamespace()+"/"+u.GetName(), "reason", err.Error())
			out = append(out, watcher.Refused(watcher.Target{ID: "flux/" + u.GetNamespace() + "/" + u.GetName(), Payload: s.payload(gvr, u)}, err))
			continue
		}
		if t != nil {
			out = append(out, *t)
		}
	}
	return out
}

// target reads one GitRepository; nil when there is nothing to watch.
// objs are the GitRepositories by namespace/name, which its includes are
// read from, and cycles the components of their cycles of includes.
func (s *Source) target(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured, used map[string]bool, objs map[string]*unstructured.Unstructured, cycles map[string]component) (*watcher.Target, error) {
	suspended, _, _ := unstructured.NestedBool(u.Object, "spec", "suspend")
	url, _, _ := unstructured.NestedString(u.Object, "spec", "url")
	ep, err := gitutil.ParseURL(url)
	if err != nil {
		return nil, refused(reasonURLInvalid, true, err)
	}
	if len(s.cfg.Hosts) > 0 && !slices.ContainsFunc(s.cfg.Hosts, func(h string) bool { return strings.EqualFold(h, ep.Host) }) {
		return nil, nil
	}
	ref, _, _ := unstructured.NestedStringMap(u.Object, "spec", "ref")
	revision, watch := Revision(ref)
	if err := semverRange(ref); err != nil {
		return nil, refused(reasonGitOperation, true, err)
	}
	var interval, timeout time.Duration
	var incl []payload.GitRepositoryInclude
	if s.cfg.Artifacts {
		if interval, timeout, err = artifactSpec(u); err != nil {
			return nil, refused(reasonUnsupported, true, err)
		}
		if incl, err = includes(u, objs, cycles); err != nil {
			return nil, err
		}
		if !watch {
			revision, watch = ref["commit"], true // its artifact is served
		}
	}
	if !watch {
		return nil, nil // pinned to a commit: nothing can change
	}
	t := &watcher.Target{
		ID: "flux/" + u.GetNamespace() + "/" + u.GetName(), URL: url, Revision: revision, Suspend: suspended, Interval: interval, Timeout: timeout,
		Payload: s.payload(gvr, u),
	}
	if len(incl) > 0 {
		p := t.Payload.(payload.GitRepository)
		p.Includes = incl
		t.Payload = p
	}
	if t.Auth, err = s.targetAuth(ctx, u, url, used); err != nil {
		return nil, err
	}
	if t.Verify, err = s.verify(ctx, u, ref); err != nil {
		return nil, err
	}
	t.Paths, _, _ = unstructured.NestedStringSlice(u.Object, "spec", "sparseCheckout")
	t.Ignore, t.IgnoreFile = ignore(u), ".sourceignore"
	t.RecurseSubmodules, _, _ = unstructured.NestedBool(u.Object, "spec", "recurseSubmodules")
	if err := t.Validate(); err != nil {
		return nil, refused(reasonUnsupported, true, err)
	}
	return t, nil
}

// payload is what a target of u carries: the object, at its generation,
// and, for a program that serves artifacts, its reconcile request.
func (s *Source) payload(gvr schema.GroupVersionResource, u *unstructured.Unstructured) payload.GitRepository {
	p := payload.GitRepository{APIVersion: gvr.GroupVersion().String(), Namespace: u.GetNamespace(), Name: u.GetName(), UID: string(u.GetUID()), Generation: u.GetGeneration()}
	if s.cfg.Artifacts {
		p.RequestedAt = u.GetAnnotations()[AnnotationRequestedAt]
	}
	return p
}

// Flux's reasons for a GitRepository not watched (source-controller's
// sourcev1 constants), and reasonUnsupported, which is this source's: a
// field it does not serve.
const (
	reasonURLInvalid       = "URLInvalid"
	reasonAuthentication   = "AuthenticationFailed"
	reasonGitOperation     = "GitOperationFailed"
	reasonProvider         = "InvalidProviderConfiguration"
	reasonVerificationMode = "InvalidVerificationMode"
	reasonVerification     = "VerificationError"
	reasonUnsupported      = "UnsupportedSpec"
)

// refused is err with Flux's reason for it; stalled when only a change
// of the spec clears it.
func refused(reason string, stalled bool, err error) error {
	return &payload.GitRepositoryError{Reason: reason, Stalled: stalled, Err: err}
}

// targetAuth reads a GitRepository's credentials: spec.provider's (a
// GitHub App's installation token by secretRef), spec.secretRef's, and
// spec.proxySecretRef's proxy. used records the Secrets of GitHub Apps.
func (s *Source) targetAuth(ctx context.Context, u *unstructured.Unstructured, url string, used map[string]bool) (auth *gitutil.Auth, err error) {
	provider, _, _ := unstructured.NestedString(u.Object, "spec", "provider")
	name, _, _ := unstructured.NestedString(u.Object, "spec", "secretRef", "name")
	switch {
	case provider == "github":
		if name == "" {
			return nil, refused(reasonProvider, true, errors.New("flux: provider github needs a secretRef with the GitHub App's keys"))
		}
		used[u.GetNamespace()+"/"+name] = true
		if auth, err = s.githubAppAuth(ctx, u.GetNamespace(), name, url); err != nil {
			return nil, refused(reasonAuthentication, false, err)
		}
	case provider != "" && provider != "generic":
		return nil, refused(reasonProvider, true, fmt.Errorf("flux: provider %q is not supported (generic and github are)", provider))
	case name != "":
		if auth, err = s.auth(ctx, u.GetNamespace(), name); err != nil {
			return nil, refused(reasonAuthentication, false, err)
		}
	}
	if proxy, _, _ := unstructured.NestedString(u.Object, "spec", "proxySecretRef", "name"); proxy != "" {
		if auth, err = s.proxy(ctx, u.GetNamespace(), proxy, auth); err != nil {
			return nil, refused(reasonAuthentication, false, err)
		}
	}
	return auth, nil
}

// Flux's own exclusions (fluxcd/pkg/sourceignore): the VCS files always,
// the others unless spec.ignore is set.
var (
	ignoreVCS     = []string{".git/", ".gitignore", ".gitmodules", ".gitattributes"}
	ignoreDefault = []string{
		"*.jpg", "*.jpeg", "*.gif", "*.png", "*.wmv", "*.flv", "*.tar.gz", "*.zip",
		".github/", ".circleci/", ".travis.yml", ".gitlab-ci.yml", "appveyor.yml", ".drone.yml",
		"cloudbuild.yaml", "codeship-services.yml", "codeship-steps.yml",
		"**/.goreleaser.yml", "**/.sops.yaml", "**/.flux.yaml",
	}
)

// ignore returns the ignore patterns of a GitRepository as Flux applies
// them to its artifact: the VCS files, then spec.ignore's lines or, when
// it is not set, Flux's default exclusions. The .sourceignore files of the
// repository come after (the target's IgnoreFile). One difference: Flux
// drops its default exclusions when a .sourceignore exists anywhere in the
// repository, which only a walk of the whole tree at every commit could
// tell; here they stay until spec.ignore is set.
func ignore(u *unstructured.Unstructured) []string {
	out := slices.Clone(ignoreVCS)
	if ignore, ok, _ := unstructured.NestedString(u.Object, "spec", "ignore"); ok {
		return append(out, strings.Split(ignore, "\n")...)
	}
	return append(out, ignoreDefault...)
}

// verify reads spec.verify: its mode (HEAD, the default, Tag or
// TagAndHEAD) and the public keys of its Secret, every value of which is
// a key, as Flux has it: armored OpenPGP keys, and SSH authorized_keys
// lines (Flux's ".sshpub" entries).
// A tag mode needs a ref that resolves through a tag, as source-controller
// has it.
func (s *Source) verify(ctx context.Context, u *unstructured.Unstructured, ref map[string]string) (*watcher.Verify, error) {
	v, ok, _ := unstructured.NestedMap(u.Object, "spec", "verify")
	if !ok {
		return nil, nil
	}
	mode, _, _ := unstructured.NestedString(v, "mode")
	if mode == "head" {
		mode = string(watcher.VerifyHEAD) // Flux's older spelling
	}
	tagged := ref["tag"] != "" || ref["semver"] != "" // commit > name > tag > semver
	if ref["name"] != "" {
		tagged = strings.HasPrefix(ref["name"], "refs/tags/")
	}
	if (!tagged || ref["commit"] != "") && (mode == string(watcher.VerifyTag) || mode == string(watcher.VerifyTagAndHEAD)) {
		return nil, refused(reasonVerificationMode, true, errors.New("cannot verify tag object's signature if a tag reference is not specified"))
	}
	name, _, _ := unstructured.NestedString(v, "secretRef", "name")
	if name == "" {
		return nil, refused(reasonVerificationMode, true, errors.New("flux: verify needs a secretRef with the trusted keys"))
	}
	sec, err := s.secret(ctx, u.GetNamespace(), name)
	if err != nil {
		return nil, refused(reasonVerification, false, fmt.Errorf("public keys secret error: %w", err))
	}
	keys := make([]string, 0, len(sec.Data))
	for _, k := range slices.Sorted(maps.Keys(sec.Data)) {
		keys = append(keys, string(sec.Data[k]))
	}
	return &watcher.Verify{Mode: watcher.VerifyMode(mode), KeyRing: strings.Join(keys, "\n")}, nil
}

// Revision maps a GitRepository's spec.ref to a watcher revision, as
// source-controller checks it out: commit > name > tag > semver > branch,
// and the branch master when none is set (Flux's default, whatever the
// remote's HEAD is). The CRD's text puts semver before tag; source-controller
// (v1.9.0, fluxcd/pkg/git's clone) takes the tag, and so does this. watch
// is false for a commit-pinned GitRepository.
func Revision(ref map[string]string) (revision string, watch bool) {
	switch {
	case ref["commit"] != "":
		return "", false
	case ref["name"] != "":
		return ref["name"], true
	case ref["tag"] != "":
		return "refs/tags/" + ref["tag"], true
	case ref["semver"] != "":
		return gitutil.SemverPrefix + ref["semver"], true // tags alone, as Flux reads it
	case ref["branch"] != "":
		return "refs/heads/" + ref["branch"], true
	}
	return "refs/heads/" + DefaultBranch, true
}

// semverRange fails when ref's semver is the ref read (see Revision) and
// is not a range: source-controller fails such a GitRepository (a semver
// parse error), where the watcher would read it as a branch or tag name.
func semverRange(ref map[string]string) error {
	if ref["semver"] == "" || ref["commit"] != "" || ref["name"] != "" || ref["tag"] != "" {
		return nil // not read: the commit, name or tag comes first
	}
	if _, err := semver.NewConstraint(ref["semver"]); err != nil {
		return fmt.Errorf("flux: spec.ref.semver %q is not a semver range: %w", ref["semver"], err)
	}
	return nil
}

// DefaultBranch is the branch a GitRepository without a ref follows.
const DefaultBranch = "master"

// secret reads a GitRepository's secretRef.
func (s *Source) secret(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	sec, err := s.kube.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("flux: secret %s/%s not found", namespace, name)
	}
	if err != nil {
		return nil, fmt.Errorf("flux: secret %s/%s: %w", namespace, name, err)
	}
	return sec, nil
}

// githubAppAuth is the installation token of the GitHub App a Secret
// names, with Flux's keys: githubAppID, githubAppInstallationID,
// githubAppPrivateKey, and optionally githubAppBaseURL and ca.crt.
func (s *Source) githubAppAuth(ctx context.Context, namespace, name, repoURL string) (*gitutil.Auth, error) {
	sec, err := s.secret(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	key := namespace + "/" + name
	app, ok := s.apps[key]
	if !ok || app.version != sec.ResourceVersion {
		d := sec.Data
		inst, _ := strconv.ParseInt(strings.TrimSpace(string(d["githubAppInstallationID"])), 10, 64)
		r, err := githubapp.New(githubapp.Config{
			AppID: strings.TrimSpace(string(d["githubAppID"])), InstallationID: inst, PrivateKey: d["githubAppPrivateKey"],
			BaseURL: strings.TrimSpace(string(d["githubAppBaseURL"])), CABundle: d["ca.crt"],
		})
		if err != nil {
			return nil, fmt.Errorf("flux: secret %s: %w", key, err)
		}
		app = githubApp{version: sec.ResourceVersion, r: r}
		s.apps[key] = app
	}
	rctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	a, err := app.r.Resolve(rctx, repoURL)
	if err != nil {
		return nil, fmt.Errorf("flux: secret %s: %w", key, err)
	}
	if a == nil {
		return nil, fmt.Errorf("flux: secret %s: %s is not on the GitHub App's host, or not HTTPS", key, gitutil.RedactURL(repoURL))
	}
	return a, nil
}

// proxy adds to a (nil: anonymous) the proxy of a GitRepository's
// proxySecretRef, with Flux's keys: address, and optionally username and
// password.
func (s *Source) proxy(ctx context.Context, namespace, name string, a *gitutil.Auth) (*gitutil.Auth, error) {
	sec, err := s.secret(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	d := sec.Data
	addr := strings.TrimSpace(string(d["address"]))
	if addr == "" {
		return nil, fmt.Errorf("flux: proxy secret %s/%s has no address", namespace, name)
	}
	out := &gitutil.Auth{}
	if a != nil {
		c := *a // a copy: a resolver's Auth is its own
		out = &c
	}
	// A rotated proxy password keeps the mirror; another proxy Secret
	// makes another identity.
	id := "proxy:" + namespace + "/" + name
	if out.ID != "" {
		id = out.ID + "+" + id
	}
	out.ID = id
	out.Proxy = &gitutil.Proxy{URL: addr, Username: string(d["username"]), Password: string(d["password"])}
	return out, nil
}

// auth reads the credentials of a GitRepository's secretRef, with Flux's
// keys: username/password, bearerToken, identity/known_hosts, ca.crt.
func (s *Source) auth(ctx context.Context, namespace, name string) (*gitutil.Auth, error) {
	sec, err := s.secret(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	d := sec.Data
	a := &gitutil.Auth{
		ID:       "secret:" + namespace + "/" + name, // a rotation keeps the mirror
		Username: string(d["username"]), Password: string(d["password"]), BearerToken: string(d["bearerToken"]),
		SSHPrivateKey: d["identity"], SSHPassphrase: string(d["password"]), KnownHosts: d["known_hosts"],
		CABundle: d["ca.crt"],
	}
	if len(a.CABundle) == 0 {
		a.CABundle = d["caFile"] // Flux's older key
	}
	if len(a.SSHPrivateKey) > 0 {
		a.Password = "" // with an SSH key, "password" is its passphrase
	} else {
		a.SSHPassphrase = ""
	}
	return a, nil
}

// artifactSpec reads what serving u's artifact takes of its spec beyond
// what a target of it watches: its interval, its timeout (the bound of
// its remote's git requests, watcher.Target.Timeout; the CRD's default
// is 60s).
func artifactSpec(u *unstructured.Unstructured) (interval, timeout time.Duration, err error) {
	if t, ok, _ := unstructured.NestedString(u.Object, "spec", "timeout"); ok {
		if timeout, err = time.ParseDuration(t); err != nil || timeout <= 0 {
			return 0, 0, fmt.Errorf("flux: spec.timeout %q is not a duration", t)
		}
	}
	iv, _, _ := unstructured.NestedString(u.Object, "spec", "interval")
	interval, err = time.ParseDuration(iv)
	if err != nil || interval <= 0 {
		return 0, 0, fmt.Errorf("flux: spec.interval %q is not a duration", iv)
	}
	return interval, timeout, nil
}
