// Package helm renders a target with the Helm SDK in-process, for the apply
// sink, as `helm template` would: no helm binary, no cluster lookups, no
// network.
//
//	sink, err := apply.New(cfg, apply.Config{Renderers: map[string]apply.Renderer{helm.Name: helm.New()}})
//
// The chart is the target's Path. Value files (paths inside the chart) are
// merged in order over the chart's values.yaml, then parameters are set
// like `--set`. The release name is payload.Render.Helm.ReleaseName, the
// release namespace payload.Render.Namespace. Dependencies come from the
// chart's vendored charts/ folder and, when the apply sink renders from the
// repository (RenderRepo), from the chart directories Chart.yaml names with
// file:// inside the repository (a commit that changes one is applied
// too); a dependency that needs a chart repository is an error saying so:
// nothing is downloaded. CRDs in crds/ are rendered first, under a policy
// as Flux's install.crds ([WithCRDs]: CreateReplace, the default, Create,
// Skip). Hooks are not rendered: the apply sink applies state, it does not
// run install steps.
//
// This package is a module of its own, so that the Helm SDK's dependencies
// reach only the programs that require it.
package helm
