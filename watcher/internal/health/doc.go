// Package health remembers which targets are failing and why, so that a
// failure is logged once when it starts or changes and once when it ends,
// not on every poll, and so that the watcher's Stats can count them.
package health
