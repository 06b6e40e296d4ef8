package gitsync

import (
	"errors"
	"fmt"
	"time"

	"github.com/modwatch/modwatch/watcher"
)

// Spec is a GitSync's spec: a path of a repository at a revision, rendered
// raw, with kustomize or with Helm, for a destination. The agent's
// configuration (source/configmap) uses it too.
type Spec struct {
	RepoURL        string      `json:"repoUrl"`
	Path           string      `json:"path,omitempty"`
	TargetRevision string      `json:"targetRevision,omitempty"`
	Raw            *struct{}   `json:"raw,omitempty"`
	Kustomize      *struct{}   `json:"kustomize,omitempty"`
	Helm           *Helm       `json:"helm,omitempty"`
	Destination    Destination `json:"destination,omitzero"`
}

// Helm is Numaplane's HelmSource.
type Helm struct {
	ValueFiles []string        `json:"valueFiles,omitempty"`
	Parameters []HelmParameter `json:"parameters,omitempty"`
}

// HelmParameter is one `--set name=value`.
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

// Payload is what a target carries for its sinks. Its JSON form
// ("renderer", "namespace", "helm") is what sink/apply reads as its Spec.
type Payload struct {
	// Renderer is "raw", "kustomize" or "helm".
	Renderer  string `json:"renderer"`
	Namespace string `json:"namespace,omitempty"`
	Helm      *Helm  `json:"helm,omitempty"`
	// Cluster is the destination cluster.
	Cluster string `json:"cluster,omitempty"`
	// Generation is the GitSync's metadata.generation (0 outside a
	// cluster): the status written for a delivery names it.
	Generation int64 `json:"generation,omitempty"`
}

// ErrInvalidSpec is returned (wrapped) for a spec that cannot be watched.
var ErrInvalidSpec = errors.New("gitsync: invalid spec")

// Target returns the target of s, or says what is wrong with it.
func (s Spec) Target(id string, interval time.Duration) (watcher.Target, error) {
	p := Payload{Renderer: "raw", Namespace: s.Destination.Namespace, Cluster: s.Destination.Cluster}
	n := 0
	if s.Raw != nil {
		n++
	}
	if s.Kustomize != nil {
		n++
		p.Renderer = "kustomize"
	}
	if s.Helm != nil {
		n++
		p.Renderer, p.Helm = "helm", s.Helm
		for i, hp := range s.Helm.Parameters {
			if hp.Name == "" {
				return watcher.Target{}, fmt.Errorf("%w: helm.parameters[%d]: name is empty", ErrInvalidSpec, i)
			}
		}
	}
	if n > 1 {
		return watcher.Target{}, fmt.Errorf("%w: at most one of raw, kustomize and helm may be set", ErrInvalidSpec)
	}
	t := watcher.Target{ID: id, URL: s.RepoURL, Revision: s.TargetRevision, Path: s.Path, Interval: interval, Payload: p}
	if err := t.Validate(); err != nil {
		return watcher.Target{}, fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	return t, nil
}
