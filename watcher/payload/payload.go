package payload

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modwatch/modwatch/watcher"
)

// Renderer names.
const (
	RendererRaw       = "raw"
	RendererKustomize = "kustomize"
	RendererHelm      = "helm"
)

// DefaultNamespace is the namespace given to namespaced objects that have
// none, unless a Render names another.
const DefaultNamespace = "default"

// ErrInvalid is returned (wrapped) for a spec that cannot be used.
var ErrInvalid = errors.New("payload: invalid")

// Render is how a target is rendered and where it goes.
type Render struct {
	// Renderer is "raw" (the default), "kustomize", "helm", or any name a
	// sink has a renderer registered under.
	Renderer string `json:"renderer,omitempty"`
	// Namespace is set on namespaced objects that have none. Cluster-scoped
	// objects are never given one. Default "default".
	Namespace string `json:"namespace,omitempty"`
	// Helm is for the Helm renderer.
	Helm *Helm `json:"helm,omitempty"`
	// Cluster is the destination cluster's name, "" for the one the sink
	// writes to.
	Cluster string `json:"cluster,omitempty"`
	// Generation is the metadata.generation of the object the target comes
	// from (0 when none): a status written for a delivery names it.
	Generation int64 `json:"generation,omitempty"`
}

// Default fills the unset fields.
func (r *Render) Default() {
	if r.Renderer == "" {
		r.Renderer = RendererRaw
	}
	if r.Namespace == "" {
		r.Namespace = DefaultNamespace
	}
}

// Validate says what is wrong with r, naming the field.
func (r Render) Validate() error {
	if r.Helm == nil {
		return nil
	}
	for i, p := range r.Helm.Parameters {
		if p.Name == "" {
			return fmt.Errorf("%w: helm.parameters[%d]: name is empty", ErrInvalid, i)
		}
	}
	return nil
}

// Helm is a Helm render, as Numaplane's HelmSource has it.
type Helm struct {
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

// Destination is the cluster a GitSync is for, and the namespace of its
// namespaced objects that have none.
type Destination struct {
	Cluster   string `json:"cluster,omitempty"`
	Namespace string `json:"namespace,omitempty"`
}

// GitSync is Numaplane's GitSync spec: a path of a repository at a
// revision, rendered raw, with kustomize or with Helm, for a destination.
type GitSync struct {
	RepoURL        string      `json:"repoUrl"`
	Path           string      `json:"path,omitempty"`
	TargetRevision string      `json:"targetRevision,omitempty"`
	Raw            *struct{}   `json:"raw,omitempty"`
	Kustomize      *struct{}   `json:"kustomize,omitempty"`
	Helm           *Helm       `json:"helm,omitempty"`
	Destination    Destination `json:"destination,omitzero"`
}

// Render returns how s is rendered, or says what is wrong with it.
func (s GitSync) Render() (Render, error) {
	r := Render{Renderer: RendererRaw, Namespace: s.Destination.Namespace, Cluster: s.Destination.Cluster}
	n := 0
	if s.Raw != nil {
		n++
	}
	if s.Kustomize != nil {
		n++
		r.Renderer = RendererKustomize
	}
	if s.Helm != nil {
		n++
		r.Renderer, r.Helm = RendererHelm, s.Helm
	}
	if n > 1 {
		return Render{}, fmt.Errorf("%w: at most one of raw, kustomize and helm may be set", ErrInvalid)
	}
	return r, r.Validate()
}

// Target returns the target of s, its Payload a [Render], or says what is
// wrong with s.
func (s GitSync) Target(id string, interval time.Duration) (watcher.Target, error) {
	r, err := s.Render()
	if err != nil {
		return watcher.Target{}, err
	}
	t := watcher.Target{ID: id, URL: s.RepoURL, Revision: s.TargetRevision, Path: s.Path, Interval: interval, Payload: r}
	if err := t.Validate(); err != nil {
		return watcher.Target{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return t, nil
}

// GitRepository names the Flux GitRepository a target stands for.
type GitRepository struct {
	// APIVersion is the served version read, such as
	// "source.toolkit.fluxcd.io/v1".
	APIVersion string `json:"apiVersion"`
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	// UID tells a recreated object from the one it replaced.
	UID string `json:"uid"`
	// Generation is the object's metadata.generation the target was made
	// from: a sink writing the object's status (sink/fluxartifact's
	// observedGeneration) writes only what that generation's spec
	// selected. A new generation is a new payload, and so a changed
	// target.
	Generation int64 `json:"generation,omitempty"`
	// RequestedAt is the object's reconcile.fluxcd.io/requestedAt
	// annotation when the target was made (source/flux sets it for a
	// program that serves artifacts, Config.Artifacts): a new request is a
	// new payload, a changed target polled at once and delivered again, so
	// that the sink writing the object's status acknowledges it
	// (status.lastHandledReconcileAt, which `flux reconcile` waits for).
	RequestedAt string `json:"requestedAt,omitempty"`
	// Includes are the object's spec.include, in order, each with the
	// artifact of the GitRepository it includes when the target was made
	// (source/flux sets them for a program that serves artifacts): a new
	// artifact included is a new payload, and the target is delivered
	// again.
	Includes []GitRepositoryInclude `json:"includes,omitempty"`
}

// GitRepositoryInclude is one of a GitRepository's spec.include: what
// another GitRepository's artifact, of the same namespace, puts into its
// own (Flux's GitRepositoryInclude).
type GitRepositoryInclude struct {
	// Name is the GitRepository included.
	Name string `json:"name"`
	// FromPath is the directory (or file) of its artifact that is put in;
	// "" is the whole artifact.
	FromPath string `json:"fromPath,omitempty"`
	// ToPath is where it goes in the including artifact; "" is Name.
	ToPath string `json:"toPath,omitempty"`
	// Artifact is the included GitRepository's status.artifact.
	Artifact Artifact `json:"artifact"`
}

// MaxIncludePath bounds an include's FromPath and ToPath: each element
// of one is a directory that reading or making it walks.
const (
	MaxIncludePath      = 1024 // bytes
	MaxIncludePathElems = 64
)

// Validate says what is wrong with i, naming the field.
func (i GitRepositoryInclude) Validate() error {
	if i.Name == "" {
		return fmt.Errorf("%w: include: repository.name is empty", ErrInvalid)
	}
	for field, p := range map[string]string{"fromPath": i.FromPath, "toPath": i.ToPath} {
		if len(p) > MaxIncludePath || strings.Count(p, "/") >= MaxIncludePathElems || strings.ContainsRune(p, 0) {
			return fmt.Errorf("%w: include '%s': %s is longer than %d bytes or %d elements, or holds a NUL byte", ErrInvalid, i.Name, field, MaxIncludePath, MaxIncludePathElems)
		}
	}
	return nil
}

// At is where the include goes: ToPath, or Name when it is "".
func (i GitRepositoryInclude) At() string {
	if i.ToPath == "" {
		return i.Name
	}
	return i.ToPath
}

// Artifact is a GitRepository's status.artifact, as Flux writes it.
type Artifact struct {
	Path           string `json:"path"`
	URL            string `json:"url"`
	Revision       string `json:"revision"`
	Digest         string `json:"digest,omitempty"`
	LastUpdateTime string `json:"lastUpdateTime"`
	Size           int64  `json:"size,omitempty"`
}

// GitRepositoryError is why a source does not watch a GitRepository
// (watcher.Refused), with Flux's reason for it, as source-controller
// names it in the object's conditions (URLInvalid, AuthenticationFailed,
// GitOperationFailed, InvalidProviderConfiguration, …), and whether
// only a change of the object's spec can clear it: Stalled, which a
// sink writing the object's status says (Flux's Stalled condition), where
// an error that may clear by itself (a Secret not there yet) is retried.
type GitRepositoryError struct {
	Reason  string
	Stalled bool
	Err     error
}

func (e *GitRepositoryError) Error() string { return e.Err.Error() }
func (e *GitRepositoryError) Unwrap() error { return e.Err }

// Validate says which field is missing.
func (g GitRepository) Validate() error {
	if g.Name == "" || g.Namespace == "" || g.UID == "" || g.APIVersion == "" {
		return fmt.Errorf("%w: GitRepository: apiVersion, namespace, name or uid is missing", ErrInvalid)
	}
	return nil
}

// Key is "namespace/name".
func (g GitRepository) Key() string { return g.Namespace + "/" + g.Name }

// Of returns the target's Payload as a T (or *T); ok is false when the
// Payload is neither, or a nil *T.
func Of[T any](t watcher.Target) (v T, ok bool) {
	switch p := t.Payload.(type) {
	case T:
		return p, true
	case *T:
		if p != nil {
			return *p, true
		}
	}
	return v, false
}
