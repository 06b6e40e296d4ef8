package gitsync_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/modwatch/modwatch/source/gitsync"
	"github.com/modwatch/modwatch/watcher"
)

// A GitSync's tracking value is its name when the name is a label value;
// a longer one is cut to 52 characters, ending alphanumeric, and a digest
// of its namespace and name follows.
func TestTrackingValue(t *testing.T) {
	digest := func(ns, name string) string {
		sum := sha256.Sum256([]byte(ns + "/" + name))
		return hex.EncodeToString(sum[:5])
	}
	n := func(s string, times int) string { return strings.Repeat(s, times) }
	tests := []struct {
		name, ns, gitsync string
		want              string
	}{
		{name: "a short name is itself", ns: "team-a", gitsync: "web", want: "web"},
		{name: "dots are kept", ns: "team-a", gitsync: "web.v1.example", want: "web.v1.example"},
		{name: "63 characters is itself", ns: "team-a", gitsync: n("a", 63), want: n("a", 63)},
		{name: "64 characters is cut, with a digest", ns: "team-a", gitsync: n("a", 64), want: n("a", 52) + "-" + digest("team-a", n("a", 64))},
		{name: "another namespace, another digest", ns: "team-b", gitsync: n("a", 64), want: n("a", 52) + "-" + digest("team-b", n("a", 64))},
		{name: "253 characters", ns: "team-a", gitsync: n("b", 253), want: n("b", 52) + "-" + digest("team-a", n("b", 253))},
		{name: "a cut that would end in '-'", ns: "team-a", gitsync: n("c", 50) + "--" + n("d", 20), want: n("c", 50) + "-" + digest("team-a", n("c", 50)+"--"+n("d", 20))},
		{name: "a cut that would end in '.'", ns: "team-a", gitsync: n("e", 51) + ".x" + n("f", 20), want: n("e", 51) + "-" + digest("team-a", n("e", 51)+".x"+n("f", 20))},
		{name: "a cut of dots and dashes", ns: "team-a", gitsync: "a" + n(".-", 40), want: "a-" + digest("team-a", "a"+n(".-", 40))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := gitsync.TrackingValue(watcher.Target{ID: gitsync.TargetID(tt.ns, tt.gitsync)})
			assert.Equal(t, tt.want, got)
			assert.Empty(t, validation.IsValidLabelValue(got), "a label value")
			assert.LessOrEqual(t, len(got), validation.LabelValueMaxLength)
		})
	}
	t.Run("not a GitSync's target", func(t *testing.T) {
		assert.Empty(t, gitsync.TrackingValue(watcher.Target{ID: "static/web"}), "refused by the sink, which names the target")
	})
}
