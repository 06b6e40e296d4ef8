// Package watcher notices new commits in git repositories and tells the
// parts that act on them.
//
// Data moves one way: a [Source] says what to watch (the whole desired set of
// [Target]s, each time it changes); the [Watcher] polls each remote once per
// cycle for all its targets, fetches only what moved into a persistent mirror
// on disk, checks whether each target's path actually changed, and hands a
// [Change] to every [Sink] of the target's route. Delivery is per (target,
// sink), serialized and latest-wins; failures are retried with backoff and
// jitter, and the [Checkpoint] in the [Store] advances only after success.
// [Observer]s hear every outcome.
//
// A program wires it in a few lines (the package example has them whole):
//
//	w := watcher.New(watcher.WithCacheDir(cacheDir))
//	w.Route(static.New(targets...), dir.New(outDir))
//	err := w.Run(logr.NewContext(ctx, log))
//
// The logger comes with the context, as in controller-runtime: Run takes
// it from its ctx, and the sources, sinks and runnables it runs get it
// through theirs (a sink's with the target and the sink named);
// logr.FromContextOrDiscard reads it.
//
// The package has no Kubernetes imports. Sources and sinks live in their own
// packages under source/ and sink/; watcher/watchertest has what users'
// tests need: a repository to commit to, a fake source, a recording sink.
package watcher
