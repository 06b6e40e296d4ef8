package watcher

import (
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/modwatch/modwatch/watcher/internal/fetchgate"
	"github.com/modwatch/modwatch/watcher/internal/health"
	"github.com/modwatch/modwatch/watcher/internal/hostgate"
	"github.com/modwatch/modwatch/watcher/internal/pool"
	"github.com/modwatch/modwatch/watcher/internal/readahead"
)

// env is what a watcher's remotes and deliverers share of it: its
// settings, its concurrency limits, its counters and where outcomes go;
// not its routes, its remotes or its lock.
type env struct {
	opts      options
	log       logr.Logger
	fetches   *fetchgate.Gate // set by Run, with polls
	hosts     *hostgate.Gate  // set by Run, with polls: every request's turn at its host
	retrying  atomic.Int64    // deliveries waiting to be retried
	abandoned atomic.Int64    // sink calls that ignored their ctx, still running
	health    health.Health
	// deliveries runs the deliverers' steps (at most the delivery limit at
	// once), polls the remotes' polls (at most the listing and fetch limits
	// together: a poll that fetches still lets others list, and one that
	// waits for a fetch slot holds no worker: see fetchgate.Gate); set by Run
	// before any starts.
	deliveries, polls *pool.Pool
	// trigger is Watcher.Trigger: a deliverer whose commit the mirror lost
	// asks for a poll with it.
	trigger func(repoURL string) bool
	// ended is told of a deliverer that finished (Watcher.removed): one
	// function for all of them, not one each.
	ended func(*deliverer)
	// subs are the submodules' mirrors, set by Run before anything reads
	// them.
	subs *submodules
	// ahead holds the checkpoints read together for remotes that started
	// together (see BatchStore).
	ahead readahead.Cache[Lookup]
}

func newEnv(o options) *env {
	return &env{
		opts: o,
		log:  logr.Discard(), // Run takes it from its context
	}
}

// emit stamps e and hands it to every observer, with what the sink was
// handed but its trees (see Event.Change): an event is a record, which an
// observer may keep, and a tree kept would keep its packs on disk.
func (v *env) emit(e Event) {
	e.Time = time.Now()
	if c := e.Change; c != nil && (c.FS != nil || c.Root != nil) {
		record := *c
		record.FS, record.Root = nil, nil
		e.Change = &record
	}
	for _, o := range v.opts.observers {
		o.Observe(e)
	}
}
