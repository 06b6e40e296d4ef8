// Package flux is a source over Flux GitRepository objects: each watched
// GitRepository is a target, so that a sink (sink/fluxreceiver) can tell
// Flux the moment its repository moves, instead of Flux finding out at its
// next interval.
//
// It uses a dynamic informer (no dependency on Flux's Go types) over the
// served version of gitrepositories.source.toolkit.fluxcd.io. When Flux is
// not installed it idles, looks again periodically, and starts watching
// when the CRD appears, without a restart; if the CRD is removed, its
// targets go and it idles again.
package flux
