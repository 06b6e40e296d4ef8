// Package helm renders a target with the Helm SDK in-process, for the apply
// sink, as `helm template` would: no helm binary, no cluster lookups, no
// network.
//
//	sink, err := apply.New(cfg, apply.Config{}, apply.WithRenderer(helm.Name, helm.New()))
//
// The chart is the target's Path. Value files (paths inside the chart) are
// merged in order over the chart's values.yaml, then parameters are set
// like `--set`. The release name is spec.Render.Helm.ReleaseName, the
// release namespace spec.Render.Namespace. Dependencies come only from the chart's
// vendored charts/ folder; a dependency missing there is an error. CRDs in
// crds/ are rendered first. Hooks are not rendered: the apply sink applies
// state, it does not run install steps.
//
// This package is a module of its own, so that the Helm SDK's dependencies
// reach only the programs that require it.
package helm
