package lru

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCacheNeverGrowsPastItsBound(t *testing.T) {
	var evicted []string
	c := New[string, int](3, func(k string, _ int) { evicted = append(evicted, k) })
	for i := range 1000 {
		c.Add(fmt.Sprint(i), i)
		require.LessOrEqual(t, c.Len(), 3)
	}
	assert.Equal(t, 3, c.Len())
	assert.Len(t, evicted, 997)
	assert.Equal(t, []int{999, 998, 997}, c.Values())
}

func TestCacheForgetsTheLeastRecentlyUsed(t *testing.T) {
	c := New[string, int](2, nil)
	c.Add("a", 1)
	c.Add("b", 2)
	_, ok := c.Get("a") // a is now the most recently used
	require.True(t, ok)
	c.Add("c", 3)
	_, ok = c.Get("b")
	assert.False(t, ok, "b, the least recently used, is forgotten")
	v, ok := c.Get("a")
	assert.True(t, ok)
	assert.Equal(t, 1, v)
}

func TestCacheAddIfAbsentKeepsTheFirst(t *testing.T) {
	c := New[string, int](2, nil)
	assert.Equal(t, 1, c.AddIfAbsent("a", 1))
	assert.Equal(t, 1, c.AddIfAbsent("a", 2))
	c.Add("a", 3)
	v, _ := c.Get("a")
	assert.Equal(t, 3, v)
	c.Remove("a")
	_, ok := c.Get("a")
	assert.False(t, ok)
	assert.Zero(t, c.Len())
}

func TestCacheOfNoBoundHoldsOne(t *testing.T) {
	c := New[int, int](0, nil)
	c.Add(1, 1)
	c.Add(2, 2)
	assert.Equal(t, []int{2}, c.Values())
}
