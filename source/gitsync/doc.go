// Package gitsync is a source over Numaplane's GitSync objects, with the
// status write-back that goes with it, and Numaplane's controller
// configuration (repository credentials from Secrets).
//
// A dynamic informer (unstructured: no dependency on Numaplane's Go types)
// watches GitSyncs in one namespace or all. Each valid GitSync whose
// destination is this cluster, and that the program accepts ([Config.Accept]),
// is one target, [TargetID] "gitsync/<namespace>/<name>", whose Payload the
// apply sink reads (render type, Helm values, destination namespace); the
// sink marks its objects as Numaplane does when given [TrackingLabel] and
// [TrackingValue] (the GitSync's name). An invalid GitSync is marked Failed with a message saying what is wrong, one
// for another cluster NotApplicable; neither stops the others.
//
// [Source.Observer] writes what the watcher did back into each GitSync's
// status, only the fields Numaplane's schema has and only when they
// changed: by default (phase, message, the Configured and Synced
// conditions and commitStatus) through a server-side apply of the status
// subresource as [DefaultFieldManager], so that the fields of any other
// writer stay as they are. A program whose own reconciler writes phase,
// message and conditions, as Numaplane's does, gives [StatusCommit]: the
// source then writes commitStatus only, and [StatusNone] nothing;
// [Config.StatusWriter] replaces the writer.
//
// The source never takes over a field another field manager owns, by
// apply or by update: it reads who owns what in the GitSync's
// metadata.managedFields, leaves those fields out of its apply
// ([ForeignFields]), and applies without force. A field another manager
// took since the cache showed the GitSync makes the apply fail with a
// conflict that names it; the source leaves it out too and applies the
// rest once more. On Numaplane's CRD, whose conditions are one atomic
// list, a reconciler's condition makes the list its own, and the source's
// Synced condition is not written; where conditions are a map list keyed
// by type, the source writes its own types and leaves the others'.
package gitsync
