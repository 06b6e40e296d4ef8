// Package apply is a sink that renders a target's manifests in-process and
// server-side applies them to a cluster, pruning what a previous commit
// applied and the current one no longer has.
//
// A delivery renders the Change's tree with the target's [Renderer], then
// applies the objects with
// github.com/fluxcd/pkg/ssa in two stages: cluster definitions
// (CustomResourceDefinitions, Namespaces, ClusterRoles) first, waited on
// until they are established, then the rest. An object is written only
// when a server-side dry run says it drifted, so an unchanged commit or a
// resync without drift writes nothing.
//
// What a target applied is recorded in the cluster, so that it survives a
// restart: each object carries the tracking label ([LabelTarget] by
// default, its value a digest that names the target, or a value the
// program chooses, Config.TrackingValue, with the digest in
// [AnnotationOwner]), and an inventory ConfigMap per target (in
// Config.InventoryNamespace) lists them. Objects listed in the inventory
// and gone from the commit are pruned, unless Config.DisablePrune is set;
// an object another target applied (by the digest, whatever value its
// label has) is left alone.
//
// A new commit dry-runs only the objects whose rendered manifest changed
// since the target's last apply (the inventory keeps a digest of each);
// every object is checked, and drift corrected, on the first delivery, when
// the target changes, and on resyncs (Config.AlwaysCheckDrift checks every
// object on every commit, as Flux does).
//
// Renderers: raw YAML and JSON are built in; kustomize and Helm are
// named in [Config.Renderers], from apply/kustomize and apply/helm. Helm
// is a module of its own (github.com/modwatch/modwatch/sink/apply/helm): a
// program that does not require it has neither its packages nor its
// modules. Kustomize is not separable that way: fluxcd/pkg/ssa reaches
// kustomize's api packages through cli-utils and cli-runtime, so every
// program that links this package links them (72 packages), and
// apply/kustomize adds only itself to that.
//
// Each delivery returns a [Result] (per object created, configured,
// unchanged, deleted, skipped or failed), which observers find in
// watcher.Event.Result.
package apply
