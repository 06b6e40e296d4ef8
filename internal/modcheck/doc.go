// Package modcheck holds the test that keeps the core module light: a
// program that requires only github.com/modwatch/modwatch (the watcher,
// gitutil, the Kubernetes-free sources and sinks) must not get Kubernetes,
// Helm, kustomize or Flux in its module graph.
package modcheck
