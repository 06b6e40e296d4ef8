// Package reads keeps what a delivery read of the repository outside its
// target's path: what its report says, and what the file systems it was
// handed read through symbolic links. The watcher delivers the target
// again when a later commit changes any of it.
package reads
