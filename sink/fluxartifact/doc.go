// Package fluxartifact serves Flux GitRepositories from the library: for
// each delivered target of source/flux, it packs the tree the target
// selects at the commit into a tarball as source-controller does, keeps it
// in its storage, serves it over HTTP, and writes the GitRepository's
// status.artifact, conditions and observed fields as source-controller
// does, so that Flux's kustomize-controller and helm-controller read the
// artifact as they read source-controller's.
//
// The tarball is byte for byte source-controller's for the same files
// (v1.9.0, fluxcd/pkg/artifact's storage): a gzip'd tar of the
// directories and regular files in lexical order, names relative to the
// root ("." first), no owner, no times, directories 0750, files 0600 (0700
// when executable), symbolic links left out; its digest is the SHA-256 of
// those bytes. The files are those the watcher hands the delivery: Flux's
// ignore rules (spec.ignore, .sourceignore, its default exclusions) and
// sparseCheckout are the target's (source/flux).
//
// A GitRepository's spec.include (payload.GitRepository.Includes, which
// source/flux fills with the artifacts included) is served as
// source-controller serves it: each included artifact, this sink's own,
// read from its storage and checked against its digest, is unpacked and
// put into the repository's tree at the include's toPath (its fromPath
// only) as source-controller's rename puts it there: the directories on
// the way made, a file over a file, never over a directory; then the
// target's ignore rules apply to the whole, the included .sourceignore
// files read too (mirror.Selection.FS), and status.includedArtifacts
// names them. The bytes are source-controller's
// (TestIncludesAreSourceControllers). An include that cannot be put in
// fails with StorageOperationFailed (CopyFailure), is retried, and so is
// one whose artifact this sink does not hold (another replica's, or one
// collected meanwhile: the next set names the new one). Differences: a
// symbolic link of the repository on the way to toPath, or at it, is
// refused, where source-controller follows it inside the checkout; and,
// as for a repository's own .sourceignore (see source/flux), an included
// one does not drop Flux's default exclusions when spec.ignore is unset.
//
// The storage is laid out as source-controller's:
// gitrepository/<namespace>/<name>/<commit>.tar.gz, with latest.tar.gz a
// link to the last one, and old artifacts collected as source-controller
// collects them: those older than the retention TTL, then the oldest
// until the retention count remains, never the current one. The URL an
// artifact is given is http://<Config.Address>/<path>, served by
// [Sink.Handler].
//
// The storage is the sink's: its folders are readable by the process's
// user only (0700, files 0600, as source-controller's), a GitRepository
// removed takes its artifacts with it (Remove, and Forget for a suspended
// one), and [Sink.Targets] lists the GitRepositories it holds artifacts
// for, so that those deleted while the program was stopped go too, once
// every source has given its set. A delivery given up on stops and puts
// nothing in place.
//
// Registered as an observer too (watcher.WithObserver), the sink writes a
// GitRepository whose repository, ref or credentials cannot be read the
// conditions source-controller writes for a failed fetch (Ready false and
// FetchFailed true with reason GitOperationFailed, Reconciling), keeping
// its artifact; its next artifact clears them, and so does its target's
// recovery at the commit it was served at (watcher.EventTargetRecovered,
// EventUpToDate), which makes it Ready again. A commit whose signature
// does not verify fails SourceVerified instead, with Flux's reasons. A
// GitRepository its source refuses (watcher.Refused) is written the
// source's reason (payload.GitRepositoryError): Stalled when only a change
// of its spec clears it, else retried. A failure observed before a
// delivery is never written after it. With a verification, SourceVerified
// and status.sourceVerificationMode say what was verified, by which keys
// (named as the key ring names them, where source-controller gives an
// OpenPGP key's ID).
//
// One sink holds a storage at a time: [New] takes an exclusive lock on
// its .lock file, and fails with [ErrStorageInUse] while another holds it.
//
// A reconcile request (`flux reconcile source git`, the
// reconcile.fluxcd.io/requestedAt annotation, which source/flux hands in
// payload.GitRepository.RequestedAt) is acknowledged in
// status.lastHandledReconcileAt with what the poll it caused found: the
// artifact, or the failure. An artifact delivered again unchanged keeps
// its lastUpdateTime. A GitRepository being deleted loses source-
// controller's finalizer ([Finalizer], put there when source-controller
// served it) once its artifacts are removed, and no other.
//
// The sink writes a GitRepository's status only when the object is the
// target's (payload.GitRepository's UID) at the generation the target was
// made from (its Generation); otherwise the delivery fails, to be replaced
// by the target the current generation makes.
package fluxartifact
