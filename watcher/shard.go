package watcher

import "fmt"

// Shard decides which remotes a watcher polls. Several watchers (the
// replicas of a controller) are given the same targets: each remote is
// polled, and its targets delivered, by the one replica whose Shard owns
// it. A remote is named by its normalised URL and credential identity (see
// [gitutil.Endpoint.Key] and [gitutil.Auth.Identity]), which every replica
// computes alike from the same targets.
//
// The watcher asks Owns at every reconciliation, and reconciles when
// Changed fires. A Shard that is also a [Runnable] is run by the watcher
// for as long as [Watcher.Run]. The Kubernetes Lease implementation is in
// the watcher/cluster module.
type Shard interface {
	// Owns reports whether this replica polls the remote named key now.
	Owns(key string) bool
	// Changed returns a channel that is closed when what Owns answers may
	// have changed (a replica came or went, this one's claim lapsed).
	Changed() <-chan struct{}
}

// WithShard makes the watcher poll only the remotes s owns; the targets of
// the others are left to the replicas that own them. Without it (the
// default) a watcher polls every remote.
//
// With a shard, the first poll of a remote whose mirror lacks the commits
// listed asks the targets' deliverers, before it fetches, whether their
// checkpoints hold those commits already: with a [Store] the replicas
// share, a replica that takes over another's remotes clones none whose
// targets the other had delivered. The answers cost a checkpoint read per
// target and sink, and wait for a deliverer busy with a slow sink at most
// five seconds.
func WithShard(s Shard) Option {
	return func(o *options) { o.shard = s; o.setOnce("shard", fmt.Sprintf("WithShard(%T)", s)) }
}
