// Package budget is the watcher's deletion budget: it holds a decision to
// remove more of a route's targets at once than a share of them, until the
// same decision is made again after a delay, or confirmed.
package budget
