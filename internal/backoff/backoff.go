// Package backoff computes retry delays: exponential with jitter, bounded.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Delay is the wait before retry number attempt (1-based): lo doubled per
// attempt, capped at hi, then jittered into [d/2, d] so that many clients
// failing together do not retry together.
func Delay(attempt int, lo, hi time.Duration) time.Duration {
	d := lo
	for i := 1; i < attempt && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// Jitter spreads d by ±fraction.
func Jitter(d time.Duration, fraction float64) time.Duration {
	if fraction <= 0 || d <= 0 {
		return d
	}
	return time.Duration(float64(d) * (1 + fraction*(2*rand.Float64()-1)))
}
