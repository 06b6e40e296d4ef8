package watcher

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
)

// blockingBatch is a BatchStore whose GetMany waits for release, every
// key holding a checkpoint.
type blockingBatch struct {
	Store
	started, release chan struct{}
}

func (s *blockingBatch) GetMany(_ context.Context, keys []string) ([]Lookup, error) {
	close(s.started)
	<-s.release
	out := make([]Lookup, len(keys))
	for i := range out {
		out[i] = Lookup{Checkpoint: Checkpoint{Commit: "c-batch"}, OK: true}
	}
	return out, nil
}

// What a batch read serves is what no write of this watcher changed: a
// key written while the batch was read (a write begun before it, or
// during it) is read alone after, as is one written after it; each key is
// served once, to the polls of its own remote while it is polled here.
func TestReadAheadServesWhatNoWriteChanged(t *testing.T) {
	store := &blockingBatch{Store: NewMemoryStore(), started: make(chan struct{}), release: make(chan struct{})}
	v := &env{opts: options{store: store, listTimeout: time.Minute}, log: logr.Discard()}
	keys := []string{"before/s", "during/s", "after/s", "kept/s", "other/s", "left/s"}
	b := &bound{}
	for _, k := range keys {
		b.sinks = append(b.sinks, &deliverer{key: k})
	}
	specs := map[string]*remoteSpec{"r1": {targets: map[string]*bound{"t": b}}}

	writing, wrote, written := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(written)
		_ = v.write("before/s", func() error { close(writing); <-wrote; return nil })
	}()
	<-writing
	read := make(chan struct{})
	go func() {
		defer close(read)
		v.readBatch(context.Background(), []string{"r1"}, specs)
	}()
	<-store.started
	close(wrote) // the write begun before the batch ends during it
	<-written
	assert.NoError(t, v.write("during/s", func() error { return nil }))
	close(store.release)
	<-read

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := &remote{key: "r1", targets: map[string]*polled{"t": {b: b}}, ctx: ctx}
	v.claim(r)
	assert.NoError(t, v.write("after/s", func() error { return nil }))
	for _, k := range []string{"before/s", "during/s", "after/s"} {
		_, ok := v.take(k, ctx)
		assert.False(t, ok, "%s was written: read it alone", k)
	}
	_, ok := v.take("other/s", context.Background())
	assert.False(t, ok, "another poller's read is its own")
	l, ok := v.take("kept/s", ctx)
	assert.True(t, ok)
	assert.Equal(t, "c-batch", l.Checkpoint.Commit)
	_, ok = v.take("kept/s", ctx)
	assert.False(t, ok, "served once")

	v.forget(r) // the remote stops: what it did not read goes
	_, ok = v.take("left/s", ctx)
	assert.False(t, ok)
	assert.Empty(t, v.ahead.entries)
	assert.Empty(t, v.ahead.writing)
	assert.Nil(t, v.ahead.touched)
}

// A remote whose mirror did not open leaves nothing read for it behind:
// when it starts later, on its own, its targets' checkpoints are read
// then.
func TestReadAheadOfARemoteThatDidNotStartIsDropped(t *testing.T) {
	store := &blockingBatch{Store: NewMemoryStore(), started: make(chan struct{}), release: make(chan struct{})}
	close(store.release)
	v := &env{opts: options{store: store, listTimeout: time.Minute}, log: logr.Discard()}
	b := &bound{sinks: []*deliverer{{key: "a/s"}, {key: "b/s"}}}
	specs := map[string]*remoteSpec{"r1": {targets: map[string]*bound{"t": b}}}
	v.readBatch(context.Background(), []string{"r1"}, specs)
	assert.Len(t, v.ahead.entries, 2)
	v.drop("r1", specs["r1"])
	assert.Empty(t, v.ahead.entries)
}
