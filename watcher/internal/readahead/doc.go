// Package readahead holds values read in batches ahead of their use, each
// for one owner's first read of its key, and never one that a write
// begun since the batch started may have changed: the watcher's
// checkpoints read together for the remotes that start together.
package readahead
