// Package cluster runs a watcher as one of several replicas of a
// Kubernetes controller, on Kubernetes' own coordination API and nothing
// else:
//
//   - [LeaseShard]: each replica holds a membership Lease
//     (coordination.k8s.io), and each remote is polled by exactly one live
//     replica, chosen by rendezvous hashing over the live members, so that
//     a replica coming or going moves about 1/N of the remotes;
//   - [ConfigMapStore]: checkpoints in ConfigMaps, so that they move with
//     ownership and a new owner does not deliver everything again;
//   - [AddToManager]: the watcher inside a controller-runtime Manager, with
//     its health and readiness checks.
//
// It is a module of its own, so that the watcher itself stays free of
// Kubernetes.
package cluster
