package backoff

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestDelayAndJitterStayInBounds(t *testing.T) {
	for attempt := 1; attempt <= 40; attempt++ {
		d := Delay(attempt, time.Second, time.Minute)
		want := min(time.Second<<min(attempt-1, 20), time.Minute)
		assert.GreaterOrEqual(t, d, want/2, "attempt %d", attempt)
		assert.LessOrEqual(t, d, want, "attempt %d", attempt)
	}
	for range 100 {
		d := Jitter(time.Minute, 0.1)
		assert.GreaterOrEqual(t, d, 54*time.Second)
		assert.LessOrEqual(t, d, 66*time.Second)
	}
	assert.Equal(t, time.Minute, Jitter(time.Minute, 0))
}
