// Package quantile summarises the latencies the benchmark programs measure.
package quantile

import (
	"slices"
	"time"
)

// Of returns the q-quantile (0 < q <= 1) of ds by nearest rank; ds need
// not be sorted and is not modified. It returns 0 for no samples.
func Of(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}
