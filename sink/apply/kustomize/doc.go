// Package kustomize renders a target with kustomize in-process
// (sigs.k8s.io/kustomize/api), for the apply sink: no kustomize binary, no
// network, no plugins.
//
//	sink, err := apply.New(cfg, apply.Config{Renderers: map[string]apply.Renderer{kustomize.Name: kustomize.New()}})
//
// The kustomization is the target's Path; every base, component and file
// it names must be inside that tree (a base in a parent directory, outside
// the target's Path, is not visible to it). A reference to a remote base or
// file is refused before kustomize runs, since kustomize would fetch it
// with git or HTTP.
package kustomize
