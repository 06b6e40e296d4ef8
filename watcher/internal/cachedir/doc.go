// Package cachedir is a watcher's cache directory while it runs: locked
// against a second watcher, cleared of what a killed one left, with a
// private temporary directory.
package cachedir
