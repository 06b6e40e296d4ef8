// Package hook is a watcher.Sink that tells something else about a
// change: [Exec] runs a command with the change in its environment, [HTTP]
// POSTs the change as JSON. Each has a timeout; a non-zero exit or a non-2xx
// answer is an error, which the watcher retries with backoff.
package hook
