// Package lazyfs is a file system opened at its first use, so that what
// a reader never reads (the watcher's Change.Root, for most sinks) costs
// nothing to open.
package lazyfs
