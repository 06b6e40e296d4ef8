// Package fetchgate bounds the watcher's fetches in progress: a poll that
// finds no slot free parks its remote in line, holding no worker, and a
// slot that frees is handed to the first in line, whose next step
// fetches.
package fetchgate
