// Package release is what the project promises a user of its modules, and
// the tools that keep the promise:
//
//   - which modules are published (every module of go.work but examples and
//     those under internal/), and that none of them requires an unpublished
//     module or carries a replace directive;
//   - a release: every module's requirements on the others set to one
//     version, the tree checked, each published module tagged
//     (vX.Y.Z at the root, sink/apply/vX.Y.Z beside it), and CHANGELOG.md
//     recording the release and the commit it was made from
//     (go run ./internal/dev/release/cmd/release -version vX.Y.Z, which
//     `make release VERSION=vX.Y.Z` calls);
//   - the module zips of a release, written in the layout of a module proxy
//     (GOPROXY=file://…), so that a release is proved by a consumer that
//     resolves it the way the go command resolves any module;
//   - the exported API of each published package compared with the last
//     release (golang.org/x/exp/apidiff); an incompatible change must be
//     named in CHANGELOG.md's Unreleased section;
//   - the Kubernetes minors the Kubernetes-facing modules are built and
//     tested at, each by a consumer module pinned at that minor.
//
// This module is not published: it is the project's tooling, and its
// requirements (golang.org/x/mod, x/tools, x/exp) stay out of every
// published module's graph.
package release
