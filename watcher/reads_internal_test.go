package watcher

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
)

type reads []string

func (r reads) Reads() []string { return r }

// What links read is kept as the file systems report it, without what is
// inside the path, above it, under a path kept or past the bound.
func TestLinkReadsKeepWhatIsOutsideOnce(t *testing.T) {
	l := &linkReads{path: "apps/x"}
	for _, p := range []string{
		"apps/x/base", "apps/x", ".", "apps", // inside, or too wide
		"shared/base", "shared/base/cm.yaml", "shared/base", // under what is kept
		"common/values.yaml", "./links/one", "../escape",
	} {
		l.add(p)
	}
	assert.Equal(t, []string{"common/values.yaml", "links/one", "shared/base"}, slices.Sorted(slices.Values(l.list())))

	l = &linkReads{path: "apps/x"}
	for i := range 2 * maxReads {
		l.add(fmt.Sprintf("shared/%04d", i))
	}
	assert.Len(t, l.list(), maxReads, "bounded")
}

// The report's reads and the links' are merged: a path under another is
// read with it, and the bound holds for both together.
func TestReadsOfMergesTheReportAndTheLinks(t *testing.T) {
	got := readsOf(reads{"shared/base/cm.yaml", "other", "apps/x/y", "apps"}, []string{"shared/base", "other/f", "z"}, "apps/x")
	assert.Equal(t, []string{"other", "shared/base", "z"}, got)
	got = readsOf(reads{"shared/base-x", "shared/base"}, []string{"shared/base/cm.yaml"}, "apps/x")
	assert.Equal(t, []string{"shared/base", "shared/base-x"}, got)
	assert.Nil(t, readsOf(nil, []string{"shared/base"}, ""), "the whole repository is the path")
	assert.Nil(t, readsOf(nil, nil, "apps/x"))

	var many reads
	var linked []string
	for i := range maxReads {
		many = append(many, fmt.Sprintf("a/%04d", i))
		linked = append(linked, fmt.Sprintf("b/%04d", i))
	}
	got = readsOf(many, linked, "apps/x")
	assert.Len(t, got, maxReads)
	assert.True(t, slices.IsSorted(got))
}
