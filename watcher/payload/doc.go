// Package payload holds the payloads that the bundled sources and sinks
// agree on, as Go types: a source puts one in a target's Payload and a sink
// reads it back with [Of]. It imports nothing from Kubernetes, so a file
// reader (source/configmap) and a cluster writer (sink/apply) can share it
// without either pulling the other's dependencies. The watcher itself never
// reads a Payload.
//
//   - [Render] says how a target's tree becomes Kubernetes objects and
//     where they go; sink/apply reads it.
//   - [GitSync] is Numaplane's GitSync spec (the CRD's and the agent's
//     configuration's form); [GitSync.Target] turns one into a target whose
//     Payload is a Render.
//   - [GitRepository] names the Flux object a target stands for;
//     source/flux gives it and sink/fluxreceiver reads it.
//
// The credentials a configuration names are package
// [github.com/modwatch/modwatch/watcher/credential]'s.
package payload
