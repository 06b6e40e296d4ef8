package watcher

import "github.com/modwatch/modwatch/gitutil"

// action is what a deliverer does with the commit a poll wants its sink to
// have.
type action int

const (
	// skip: the sink has the commit.
	skip action = iota
	// record: the target's tree is the one the sink has; the checkpoint
	// moves to the commit and nothing is delivered.
	record
	// deliver: the sink is handed a Change.
	deliver
)

func (a action) String() string {
	switch a {
	case skip:
		return "skip"
	case record:
		return "record"
	default:
		return "deliver"
	}
}

// decision is what [decide] says.
type decision struct {
	action action
	// reason and from are the Change's, when action is deliver.
	reason Reason
	from   gitutil.Hash
}

// decide says what to do with commit, whose tree at the target's path is
// tree, for a sink whose checkpoint is cp (have is false when it has none),
// for a target whose fingerprint is now fp. A resync delivers even what the
// checkpoint has. A delivery of a commit other than the checkpoint's, for
// an unchanged target, is ReasonNewCommit: the caller, who can read the
// history, makes it ReasonForcePush when cp.Commit is not an ancestor.
func decide(cp Checkpoint, have bool, commit, tree gitutil.Hash, fp string, resync bool) decision {
	switch {
	case !have:
		return decision{action: deliver, reason: ReasonInitial}
	case cp.Target != fp:
		return decision{action: deliver, reason: ReasonTargetChanged, from: cp.Commit}
	case cp.Commit == commit && resync:
		return decision{action: deliver, reason: ReasonResync, from: cp.Commit}
	case holds(cp, have, commit, fp, resync):
		return decision{action: skip}
	case cp.Tree == tree && !resync:
		return decision{action: record, from: cp.Commit}
	default:
		return decision{action: deliver, reason: ReasonNewCommit, from: cp.Commit}
	}
}

// holds reports whether the sink has commit for the target as it is now,
// with no resync asked for: whatever the tree, there is nothing to do.
func holds(cp Checkpoint, have bool, commit gitutil.Hash, fp string, resync bool) bool {
	return have && cp.Target == fp && cp.Commit == commit && !resync
}
