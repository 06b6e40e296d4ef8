// Package cachedir is a watcher's cache directory while it runs: locked
// against a second watcher, cleared of what a killed one left, with a
// private temporary directory; and its mirrors' directories: their names,
// their last use, and the collection of those unused past their grace.
package cachedir
