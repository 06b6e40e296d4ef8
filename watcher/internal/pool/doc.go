// Package pool runs the watcher's tasks (its deliverers and its remotes)
// one step at a time on a bounded number of goroutines: a task with
// nothing to do holds no goroutine.
package pool
