package watcher

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestDecideOffer(t *testing.T) {
	for _, tc := range []struct {
		name  string
		facts offerFacts
		want  offerDecision
	}{
		{"a new commit", offerFacts{}, offerDecision{action: offerCommit}},
		{"a new commit to verify", offerFacts{verify: true}, offerDecision{action: offerCommit, verify: true}},
		{"offered already", offerFacts{offered: true}, offerDecision{action: offerKept}},
		{"offered already, to verify", offerFacts{offered: true, verify: true}, offerDecision{action: offerKept}},
		{"suspended", offerFacts{suspended: true}, offerDecision{action: offerHeld}},
		{"suspended, to verify", offerFacts{suspended: true, verify: true}, offerDecision{action: offerHeld}},
		{"suspended, held already", offerFacts{suspended: true, offered: true}, offerDecision{action: offerKept}},
		{"the fetch failed", offerFacts{fetchFailed: true}, offerDecision{action: offerFailed}},
		{"the fetch failed, offered already", offerFacts{fetchFailed: true, offered: true}, offerDecision{action: offerFailed}},
		{"the fetch failed, suspended", offerFacts{fetchFailed: true, suspended: true}, offerDecision{action: offerFailed}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := decideOffer(tc.facts)
			assert.Equal(t, tc.want, got, "%s", got.action)
		})
	}
}
