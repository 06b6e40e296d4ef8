// Package repocheck holds tests of the repository itself:
//
//   - a program that requires only the core module
//     (github.com/modwatch/modwatch: the watcher, gitutil, the
//     Kubernetes-free sources and sinks) gets no Kubernetes, Helm,
//     kustomize or Flux module in its module graph;
//   - no source imports a sink and no sink a source: what both need
//     lives below them;
//   - no library package keeps mutable package-level state: a var is a
//     sentinel error, a compile-time check, a compiled regexp or a
//     reviewed read-only table (TestNoMutablePackageState);
//   - every Go snippet of README.md and docs/*.md is a verbatim excerpt of a test or
//     example that compiles (and mostly runs), named by the comment above
//     it, so that the README cannot rot.
package repocheck
