package watcher

import (
	"context"
	"testing"
	"testing/synctest"
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
		out[i] = Lookup{Checkpoint: Checkpoint{Commit: hashOf("c-batch")}, OK: true}
	}
	return out, nil
}

// What a batch read serves is what no write of this watcher changed: a
// key being written when the batch starts, or written while it is read or
// after, is read alone; a read of a key whose batch is being read waits
// for it; each key is served once, to the polls of its own remote while it
// is polled here.
func TestReadAheadServesWhatNoWriteChanged(t *testing.T) {
	synctest.Test(t, readAheadServesWhatNoWriteChanged)
}

func readAheadServesWhatNoWriteChanged(t *testing.T) {
	store := &blockingBatch{Store: NewMemoryStore(), started: make(chan struct{}), release: make(chan struct{})}
	v := &env{opts: options{store: store, listTimeout: time.Minute}, log: logr.Discard()}
	keys := []string{"before/s", "during/s", "after/s", "kept/s", "other/s"}
	b := &boundTarget{}
	for _, k := range keys {
		b.sinks = append(b.sinks, &deliverer{key: k})
	}
	b2 := &boundTarget{sinks: []*deliverer{{key: "left/s"}}}
	specs := map[string]*remoteSpec{"r1": {targets: map[targetKey]*boundTarget{{id: "t"}: b, {id: "t2"}: b2}}}

	writing, wrote, written := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(written)
		_ = v.ahead.Write("before/s", func() error { close(writing); <-wrote; return nil })
	}()
	<-writing
	read := v.startBatch([]string{"r1"}, specs)
	close(wrote) // the write begun before the batch ends before it is read
	<-written
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := &remote{key: "r1", targets: map[targetKey]*pollState{{id: "t"}: {bound: b}, {id: "t2"}: {bound: b2}}, ctx: ctx}
	v.claim(r) // the remote starts while the batch is read
	waited := make(chan Lookup, 1)
	go func() {
		l, _ := v.ahead.Take(ctx, "kept/s", ctx)
		waited <- l
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		read(context.Background())
	}()
	<-store.started
	assert.NoError(t, v.ahead.Write("during/s", func() error { return nil }))
	synctest.Wait()
	select {
	case <-waited:
		t.Fatal("a read of a key whose batch is being read did not wait for it")
	default:
	}
	close(store.release)
	<-done
	assert.Equal(t, hashOf("c-batch"), (<-waited).Checkpoint.Commit, "a read waits for the batch of its key")

	assert.NoError(t, v.ahead.Write("after/s", func() error { return nil }))
	for _, k := range []string{"before/s", "during/s", "after/s"} {
		_, ok := v.ahead.Take(ctx, k, ctx)
		assert.False(t, ok, "%s was written: read it alone", k)
	}
	_, ok := v.ahead.Take(ctx, "other/s", context.Background())
	assert.False(t, ok, "another poller's read is its own")
	_, ok = v.ahead.Take(ctx, "kept/s", ctx)
	assert.False(t, ok, "served once")

	v.forget(r, map[targetKey]*boundTarget{{id: "t2"}: b2}) // t leaves the remote: it may come back delivered elsewhere
	_, ok = v.ahead.Take(ctx, "other/s", ctx)
	assert.False(t, ok, "a target that left is read alone")
	// Every other key was served, written or forgotten (asserted above):
	// the entry left is left/s's.
	assert.Equal(t, 1, v.ahead.Len(), "a target that stays keeps its entry")
	v.forget(r, nil) // the remote stops: what it did not read goes
	assert.Zero(t, v.ahead.Len())
}

// A remote whose mirror did not open leaves nothing read for it behind:
// when it starts later, on its own, its targets' checkpoints are read
// then.
func TestReadAheadOfARemoteThatDidNotStartIsDropped(t *testing.T) {
	store := &blockingBatch{Store: NewMemoryStore(), started: make(chan struct{}), release: make(chan struct{})}
	close(store.release)
	v := &env{opts: options{store: store, listTimeout: time.Minute}, log: logr.Discard()}
	b := &boundTarget{sinks: []*deliverer{{key: "a/s"}, {key: "b/s"}}}
	specs := map[string]*remoteSpec{"r1": {targets: map[targetKey]*boundTarget{{id: "t"}: b}}}
	read := v.startBatch([]string{"r1"}, specs)
	v.drop("r1", specs)
	read(context.Background())
	assert.Zero(t, v.ahead.Len())
}

// A read waiting for a batch gives up when its poller stops.
func TestReadAheadWaitEndsWithThePoller(t *testing.T) {
	store := &blockingBatch{Store: NewMemoryStore(), started: make(chan struct{}), release: make(chan struct{})}
	defer close(store.release)
	v := &env{opts: options{store: store, listTimeout: time.Minute}, log: logr.Discard()}
	b := &boundTarget{sinks: []*deliverer{{key: "a/s"}, {key: "b/s"}}}
	specs := map[string]*remoteSpec{"r1": {targets: map[targetKey]*boundTarget{{id: "t"}: b}}}
	v.startBatch([]string{"r1"}, specs) // never read
	live, stop := context.WithCancel(context.Background())
	v.claim(&remote{key: "r1", targets: map[targetKey]*pollState{{id: "t"}: {bound: b}}, ctx: live})
	stop()
	_, ok := v.ahead.Take(context.Background(), "a/s", live)
	assert.False(t, ok)
}
