package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/watcher"
)

func TestReadTargetsReadsWhatMeasureWrites(t *testing.T) {
	want := []watcher.Target{
		{ID: "r000/app00", URL: "http://127.0.0.1:1/fleet/r000", Path: "app00"},
		{ID: "r000/app01", URL: "http://127.0.0.1:1/fleet/r000", Path: "app01", Paths: []string{"a", "b"}},
	}
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	require.NoError(t, enc.Encode(len(want)))
	for _, tg := range want {
		require.NoError(t, enc.Encode(tg))
	}
	got, err := readTargets(&in)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	assert.Equal(t, len(want), cap(got), "the list is made at the size announced")
}

func TestReadTargetsRefusesWhatDoesNotAddUp(t *testing.T) {
	for name, in := range map[string]string{
		"empty":          "",
		"not a number":   `"two"`,
		"negative":       "-1",
		"too many":       "10000001",
		"fewer":          "2\n" + `{"ID":"a"}`,
		"more":           "1\n" + `{"ID":"a"}` + "\n" + `{"ID":"b"}`,
		"not a target":   "1\n[1,2]",
		"a fraction":     "1.5",
		"unended target": "1\n" + `{"ID":"a"`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := readTargets(strings.NewReader(in))
			assert.Error(t, err)
		})
	}
}

func TestAShardOfNoneOwnsNoRemoteAndTheOthersSplitThem(t *testing.T) {
	none, err := parseShard("none")
	require.NoError(t, err)
	var parts [3]*fixedShard
	for i := range parts {
		parts[i], err = parseShard(fmt.Sprintf("%d/3", i))
		require.NoError(t, err)
	}
	for k := range 300 {
		key := fmt.Sprintf("http://127.0.0.1:1/fleet/r%03d#", k)
		assert.False(t, none.Owns(key), key)
		owners := 0
		for _, p := range parts {
			if p.Owns(key) {
				owners++
			}
		}
		assert.Equal(t, 1, owners, key)
	}
	for _, bad := range []string{"3/3", "1", "a/b", "0/0", "-1/3"} {
		_, err := parseShard(bad)
		assert.Error(t, err, bad)
	}
}

// A curve row gives each round, its median, the ratio of the medians, and
// the collector's part with what of it was idle-priority.
func TestACurveRowGivesEachRoundTheMedianAndTheCollectorsIdlePart(t *testing.T) {
	round := func(cpu, gc, idle time.Duration, gcs int) report {
		return report{CycleCPU: cpu, CycleGC: gc, CycleGCIdle: idle, CycleGCs: gcs, Cycles: 20, CycleAlloc: 5200, Objects: 1500}
	}
	got := [][]report{
		{round(400*time.Millisecond, 50*time.Millisecond, 30*time.Millisecond, 5), round(500*time.Millisecond, 80*time.Millisecond, 60*time.Millisecond, 5), round(440*time.Millisecond, 50*time.Millisecond, 20*time.Millisecond, 4)},
		{round(4*time.Second, 2*time.Second, time.Second, 3), round(6*time.Second, 3*time.Second, 2*time.Second, 3), round(7*time.Second, 4*time.Second, 3*time.Second, 3)},
	}
	rows := curveRows([]int{1000, 10000}, 10, got)
	require.Len(t, rows, 2)
	assert.Equal(t, "400µs, 500µs, 440µs (median 440µs)", rows[0].Ours)
	assert.Contains(t, rows[0].What, "the collector's time by the runtime's estimate: 50µs (idle 30µs; 5 collections in 20 cycles), 80µs (idle 60µs; 5 collections in 20 cycles)")
	assert.Equal(t, "400µs, 600µs, 700µs (median 600µs)", rows[1].Ours)
	assert.Contains(t, rows[1].What, "300µs (idle 200µs; 3 collections in 20 cycles)")
	assert.Equal(t, "440µs (the median at 1000 remotes)", rows[1].Base)
	assert.Equal(t, "1.36", rows[1].Ratio)
}

func TestWithTheCollectorOffTheCyclesWaitForNoCollection(t *testing.T) {
	if got := collectionsWanted(); got != minGCs {
		t.Fatalf("with the collector on: %d collections wanted, want %d", got, minGCs)
	}
	old := debug.SetGCPercent(-1)
	defer debug.SetGCPercent(old)
	if old < 0 {
		t.Fatal("asking turned the collector off")
	}
	if got := collectionsWanted(); got != 0 {
		t.Fatalf("with GOGC=off: %d collections wanted, want none", got)
	}
	if p := debug.SetGCPercent(-1); p != -1 {
		t.Fatalf("asking changed the collector's setting to %d", p)
	}
}
