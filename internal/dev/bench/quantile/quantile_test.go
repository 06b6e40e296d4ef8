package quantile

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestOf(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i))
	}
	assert.Equal(t, time.Duration(50), Of(ds, 0.5))
	assert.Equal(t, time.Duration(99), Of(ds, 0.99))
	assert.Equal(t, time.Duration(100), Of(ds, 1))
	assert.Equal(t, time.Duration(1), Of(ds, 0.001))
	assert.Equal(t, time.Duration(100), ds[0], "the input is not sorted in place")
	assert.Zero(t, Of[time.Duration](nil, 0.5))
	assert.Equal(t, int64(3), Of([]int64{5, 1, 3}, 0.5), "sizes too")
	assert.Equal(t, time.Duration(7), Of([]time.Duration{7}, 0.99))
}
