// Package gitsync is a source over Numaplane's GitSync objects, with the
// status write-back that goes with it, and Numaplane's controller
// configuration (repository credentials from Secrets).
//
// A dynamic informer (unstructured: no dependency on Numaplane's Go types)
// watches GitSyncs in one namespace or all. Each valid GitSync whose
// destination is this cluster is one target, "gitsync/<namespace>/<name>",
// whose Payload the apply sink reads (render type, Helm values, destination
// namespace). An invalid GitSync is marked Failed with a message saying what
// is wrong, one for another cluster NotApplicable; neither stops the others.
//
// [Source.Observer] writes what the watcher did back into each GitSync's
// status (commitStatus, phase, Configured and Synced conditions), through
// the status subresource and only when it changed.
package gitsync
