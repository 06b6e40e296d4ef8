package configmap

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"reflect"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/modwatch/modwatch/internal/filewatch"
	"github.com/modwatch/modwatch/watcher"
)

// Reload is the outcome of reading the file after it changed (or of
// reading a reference generator's files again).
type Reload struct {
	// Targets is the set handed to the watcher; on error, the last good set
	// that stays in place. It is the watcher's slice: read it, do not
	// change it.
	Targets []watcher.Target
	// Err says why the file could not be used; nil on success.
	Err error
	// Missing says the file is not there: the last good set (Targets, none
	// before the first good read) stays, for as long as it is missing.
	Missing bool
	// Data is the file's content, when it was read and used: the program
	// reads its own keys from it (see [LoadOptions].OwnKeys).
	Data []byte
}

// Options say which file a [Source] reads and what the program adds to
// it, as a struct, as controller-runtime's manager.Options. Zero values
// are defaults.
type Options struct {
	// Path is the configuration file (a mounted ConfigMap's key).
	Path string
	// LoadOptions say how the file is read: Prefix starts the target IDs
	// (default "configmap"); OwnKeys are the keys the program reads itself
	// (from [Reload].Data); Values reads a keyValueGenerator.reference's
	// files (see [GitValues]), again at each change of the file and every
	// ValuesRefresh; Credentials is handed the credentials the file names
	// (gitDefinition.repoCredential, the reference files'), before the
	// targets that need them, for the program to resolve (typically
	// gitsync.Credentials.Set): its error makes the file unused, as a
	// parse error does.
	LoadOptions
	// Debounce is how long the directory must be quiet before the file is
	// read again. Default 100ms.
	Debounce time.Duration
	// ValuesRefresh is how often a reference generator's files are read
	// again. Default 1m; negative: only when the file changes.
	ValuesRefresh time.Duration
	// OnReload, when set, is called after each reading of the file (at
	// the start and after each change of content), from the source's
	// goroutine.
	OnReload func(Reload)
}

// Source reads targets from a mounted ConfigMap file.
type Source struct {
	cfg Options // defaulted
	log logr.Logger
}

var _ watcher.Source = (*Source)(nil)

// New returns a source reading the file cfg names.
func New(cfg Options) *Source {
	cfg.Prefix = cmp.Or(cfg.Prefix, "configmap")
	cfg.Debounce = cmp.Or(cfg.Debounce, 100*time.Millisecond)
	cfg.ValuesRefresh = cmp.Or(cfg.ValuesRefresh, time.Minute)
	if cfg.OnReload == nil {
		cfg.OnReload = func(Reload) {}
	}
	return &Source{cfg: cfg, log: logr.Discard()}
}

// Run watches the file until ctx is done. It fails at once when the file's
// directory cannot be watched.
func (s *Source) Run(ctx context.Context, update func([]watcher.Target)) error {
	s.log = logr.FromContextOrDiscard(ctx)
	r := &run{s: s, ctx: ctx, update: update}
	// A reference generator's files change without the file changing:
	// they are read again every refresh interval.
	defer every(ctx, s.cfg.ValuesRefresh, &r.mu, func() {
		if r.refresh && r.loaded && r.last != nil && !r.stopped {
			r.load(r.last, true)
		}
	})()
	defer func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.stopped = true
	}()
	return filewatch.Watch(ctx, s.cfg.Path, s.cfg.Debounce, s.log, r.file)
}

// A run is one Run's state, guarded by mu: the file watcher's calls and the
// refresh's are ordered by it. The program's code (update, OnReload, the
// logger, the credentials and values it reads) runs under mu, so that the
// sets reach the watcher in order; no method of Source takes mu, so that
// code cannot wait on it.
type run struct {
	s      *Source
	ctx    context.Context
	update func([]watcher.Target)

	mu      sync.Mutex
	good    []watcher.Target
	loaded  bool // a good set was handed over
	stopped bool
	last    []byte // the file as last read
	refresh bool   // it has a reference generator: its files are read again
}

// file takes what the file watcher read: the file's bytes, or why not. A
// file that is missing or unreadable is no set, never an empty one: the
// last good set stays (none before the first good read, so nothing is
// removed at start either) and the watcher is told why (watcher.NoSet).
func (r *run) file(data []byte, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		err = fmt.Errorf("configmap: %s is missing: %w", r.s.cfg.Path, err)
		r.s.log.Error(err, "configuration file missing: the last good targets stay, nothing is removed", "targets", len(r.good))
		watcher.NoSet(r.ctx, err)
		r.s.cfg.OnReload(Reload{Targets: r.good, Err: err, Missing: true})
	case err != nil:
		err = fmt.Errorf("configmap: read %s: %w", r.s.cfg.Path, err)
		r.s.log.Error(err, "configuration kept")
		watcher.NoSet(r.ctx, err)
		r.s.cfg.OnReload(Reload{Targets: r.good, Err: err})
	default:
		r.last = data
		r.load(data, false)
	}
}

func (r *run) load(data []byte, again bool) {
	ok, ref := r.s.load(r.ctx, data, again, &r.good, r.update)
	if ok {
		r.loaded, r.refresh = true, ref
	}
}

// every calls fn, holding mu, every d (none when d is 0 or less) until
// ctx ends or the returned func is called, which waits for it.
func every(ctx context.Context, d time.Duration, mu *sync.Mutex, fn func()) (stop func()) {
	if d <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	tick := time.NewTicker(d)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			mu.Lock()
			fn()
			mu.Unlock()
		}
	}()
	return func() {
		cancel()
		tick.Stop()
		<-done
	}
}

// load reads data into targets and hands them to update, unless they are
// the ones handed last and again is set (a refresh of the reference
// files). The caller holds the lock of Run.
func (s *Source) load(ctx context.Context, data []byte, again bool, good *[]watcher.Target, update func([]watcher.Target)) (ok, hasReference bool) {
	l, err := Load(ctx, data, s.cfg.LoadOptions)
	if err != nil {
		if ctx.Err() != nil {
			return false, false
		}
		err = fmt.Errorf("%s: %w", s.cfg.Path, err)
		s.log.Error(err, "configuration not used; the last good one stays", "targets", len(*good))
		watcher.NoSet(ctx, err)
		s.cfg.OnReload(Reload{Targets: *good, Err: err})
		return false, false
	}
	hasReference = l.Config.Source.KeyValueGenerator.Reference != nil
	if again && reflect.DeepEqual(l.Targets, *good) {
		return true, hasReference
	}
	*good = l.Targets
	if len(l.Targets) == 0 {
		s.log.Info("configuration is explicitly empty: every target is removed", "path", s.cfg.Path)
	} else {
		s.log.Info("configuration loaded", "path", s.cfg.Path, "targets", len(l.Targets), "reference", hasReference)
	}
	update(l.Targets)
	s.cfg.OnReload(Reload{Targets: l.Targets, Data: data})
	return true, hasReference
}
