package gitsync

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A GitSync whose repository failed to be polled is synced again when
// its target recovers at the commit applied before; not when the
// failure was the apply's, nor at another commit (its delivery says).
func TestARecoveredTargetIsSyncedAgain(t *testing.T) {
	now := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		before   mutation
		commit   string
		resynced bool
	}{
		{"poll failed", failed(1, "", "SyncFailed", errors.New("503")), "c1", true},
		{"ref vanished", failed(1, "", "RefVanished", errors.New("gone")), "c1", true},
		{"apply failed", failed(1, "c1", "ApplyFailed", errors.New("denied")), "c1", false},
		{"another commit", failed(1, "", "SyncFailed", errors.New("503")), "c2", false},
	} {
		s := &Status{}
		synced(1, "c1", "applied c1")(s, now)
		tc.before(s, now)
		recovered(1, tc.commit)(s, now)
		c := meta.FindStatusCondition(s.Conditions, ConditionSynced)
		assert.Equal(t, tc.resynced, c.Status == metav1.ConditionTrue, tc.name)
		if tc.resynced {
			assert.Equal(t, PhaseRunning, s.Phase, tc.name)
			assert.True(t, s.CommitStatus.Synced, tc.name)
			assert.Empty(t, s.CommitStatus.Error, tc.name)
		}
	}
}
