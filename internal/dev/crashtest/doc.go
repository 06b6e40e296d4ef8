// Package crashtest kills a watcher with SIGKILL in the middle of its work
// (publishing a tree, fetching, repacking, writing a checkpoint), again and
// again, and checks what a restart finds: nothing half-published, no
// temporary file left, the latest commit delivered. It holds only tests.
package crashtest
