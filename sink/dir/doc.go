// Package dir is a watcher.Sink that publishes each target's tree into a
// directory. Each commit is written as a new tree beside the old one, then
// a symlink is swapped atomically to it, so a reader never sees a
// half-written tree; the old tree is removed after the swap.
package dir
