package reads

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
)

// What links read is kept as the file systems report it, without what is
// inside the path, above it, under a path kept or past the bound.
func TestLinkReadsKeepWhatIsOutsideOnce(t *testing.T) {
	l := NewLinks("apps/x")
	for _, p := range []string{
		"apps/x/base", "apps/x", ".", "apps", // inside, or too wide
		"shared/base", "shared/base/cm.yaml", "shared/base", // under what is kept
		"common/values.yaml", "./links/one", "../escape",
	} {
		l.add(p)
	}
	assert.Equal(t, []string{"common/values.yaml", "links/one", "shared/base"}, slices.Sorted(slices.Values(l.List())))

	l = NewLinks("apps/x")
	for i := range 2 * Max {
		l.add(fmt.Sprintf("shared/%04d", i))
	}
	assert.Len(t, l.List(), Max, "bounded")
}

// The report's reads and the links' are merged: a path under another is
// read with it, and the bound holds for both together.
func TestOfMergesTheReportAndTheLinks(t *testing.T) {
	got := Of([]string{"shared/base/cm.yaml", "other", "apps/x/y", "apps"}, []string{"shared/base", "other/f", "z"}, "apps/x")
	assert.Equal(t, []string{"other", "shared/base", "z"}, got)
	got = Of([]string{"shared/base-x", "shared/base"}, []string{"shared/base/cm.yaml"}, "apps/x")
	assert.Equal(t, []string{"shared/base", "shared/base-x"}, got)
	assert.Nil(t, Of(nil, []string{"shared/base"}, ""), "the whole repository is the path")
	assert.Nil(t, Of(nil, nil, "apps/x"))

	var many []string
	var linked []string
	for i := range Max {
		many = append(many, fmt.Sprintf("a/%04d", i))
		linked = append(linked, fmt.Sprintf("b/%04d", i))
	}
	got = Of(many, linked, "apps/x")
	assert.Len(t, got, Max)
	assert.True(t, slices.IsSorted(got))
}
