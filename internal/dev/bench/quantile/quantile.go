// Package quantile summarises the latencies the benchmark programs measure.
package quantile

import (
	"cmp"
	"slices"
)

// Of returns the q-quantile (0 < q <= 1) of ds (latencies, sizes) by
// nearest rank; ds need not be sorted and is not modified. It returns 0
// for no samples.
func Of[T cmp.Ordered](ds []T, q float64) T {
	if len(ds) == 0 {
		var zero T
		return zero
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}
