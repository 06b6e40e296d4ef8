package watcher

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/modwatch/modwatch/gitutil"
)

func TestDecide(t *testing.T) {
	c1, c2, t1, t2, none := gitutil.Hash{0xc1}, gitutil.Hash{0xc2}, gitutil.Hash{0x71}, gitutil.Hash{0x72}, gitutil.Hash{}
	cp := Checkpoint{Commit: c1, Tree: t1, Target: "fp"}
	for _, tc := range []struct {
		name   string
		cp     Checkpoint
		have   bool
		commit gitutil.Hash
		tree   gitutil.Hash
		fp     string
		resync bool
		want   decision
	}{
		{"first delivery", Checkpoint{}, false, c1, t1, "fp", false, decision{deliver, ReasonInitial, none}},
		{"first delivery on a resync", Checkpoint{}, false, c1, t1, "fp", true, decision{deliver, ReasonInitial, none}},
		{"has it", cp, true, c1, t1, "fp", false, decision{action: skip}},
		{"same tree: record", cp, true, c2, t1, "fp", false, decision{action: record, from: c1}},
		{"new tree", cp, true, c2, t2, "fp", false, decision{deliver, ReasonNewCommit, c1}},
		{"resync of what it has", cp, true, c1, t1, "fp", true, decision{deliver, ReasonResync, c1}},
		{"resync with a new commit of the same tree", cp, true, c2, t1, "fp", true, decision{deliver, ReasonNewCommit, c1}},
		{"target changed", cp, true, c1, t1, "fp2", false, decision{deliver, ReasonTargetChanged, c1}},
		{"target changed to another tree", cp, true, c2, t2, "fp2", false, decision{deliver, ReasonTargetChanged, c1}},
		{"target changed on a resync", cp, true, c1, t1, "fp2", true, decision{deliver, ReasonTargetChanged, c1}},
		{"a checkpoint with no tree (an older record)", Checkpoint{Commit: c1, Target: "fp"}, true, c2, t1, "fp", false, decision{deliver, ReasonNewCommit, c1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := decide(tc.cp, tc.have, tc.commit, tc.tree, tc.fp, tc.resync)
			assert.Equal(t, tc.want, got, "%s", got.action)
		})
	}
}
