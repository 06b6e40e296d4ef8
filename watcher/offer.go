package watcher

// offerAction is what a poll does with the commit a target resolved to.
type offerAction int

const (
	// offerFailed: the fetch of the commit failed; the target fails.
	offerFailed offerAction = iota
	// offerKept: the deliverers were offered the commit already; the
	// target only counts as polled.
	offerKept
	// offerHeld: the target is suspended; its deliverers drop what they
	// were to deliver and EventSuspended reports the commit.
	offerHeld
	// offerCommit: the commit's tree is hashed, and the commit offered
	// to the deliverers.
	offerCommit
)

func (a offerAction) String() string {
	switch a {
	case offerFailed:
		return "failed"
	case offerKept:
		return "kept"
	case offerHeld:
		return "held"
	default:
		return "offer"
	}
}

// offerFacts are what decides what a poll does with a target's commit.
type offerFacts struct {
	fetchFailed bool // the fetch of the commit failed
	offered     bool // the commit is the one last offered to the deliverers
	suspended   bool // Target.Suspend
	verify      bool // Target.Verify is set
}

// offerDecision is what [decideOffer] says.
type offerDecision struct {
	action offerAction
	// verify: the commit's signatures are checked before its tree is
	// hashed, when action is offerCommit; a failure fails the target.
	verify bool
}

// decideOffer says what a poll does with the commit a target resolved
// to. A commit offered already is not offered again, nor held again: a
// suspension is reported once for each commit. What is not offered stays
// unverified: the next poll of a new commit verifies it.
func decideOffer(f offerFacts) offerDecision {
	switch {
	case f.fetchFailed:
		return offerDecision{action: offerFailed}
	case f.offered:
		return offerDecision{action: offerKept}
	case f.suspended:
		return offerDecision{action: offerHeld}
	default:
		return offerDecision{action: offerCommit, verify: f.verify}
	}
}
