package configmap

import (
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
	"github.com/modwatch/modwatch/watcher/spec"
)

// Reload is the outcome of reading the file after it changed (or of
// reading a reference generator's files again).
type Reload struct {
	// Targets is the set handed to the watcher; on error, the last good set
	// that stays in place.
	Targets []watcher.Target
	// Err says why the file could not be used; nil on success.
	Err error
	// Missing says the file is gone and the last good set (Targets) stays
	// until the grace of [WithMissingGrace] ends.
	Missing bool
	// Removed says the file has been gone for the whole grace, or was
	// absent at start: Targets is empty and the watcher was told so.
	// Data is the file's content, when it was read and used: the program
	// reads its own keys from it (see [WithOwnKeys]).
	Data    []byte
	Removed bool
}

// DefaultMissingGrace is how long the file may be absent before its
// targets are removed.
const DefaultMissingGrace = 5 * time.Minute

// Source reads targets from a mounted ConfigMap file.
type Source struct {
	path     string
	prefix   string
	debounce time.Duration
	grace    time.Duration
	log      logr.Logger
	onReload func(Reload)
	ownKeys  []string
	values   Values
	creds    func([]spec.RepoCredential) error
	refresh  time.Duration
}

var _ watcher.Source = (*Source)(nil)

// Option configures a Source.
type Option func(*Source)

// WithLogger sets the logger. Default: discard.
func WithLogger(l logr.Logger) Option { return func(s *Source) { s.log = l } }

// WithDebounce sets how long the directory must be quiet before the file is
// read again. Default 100ms.
func WithDebounce(d time.Duration) Option { return func(s *Source) { s.debounce = d } }

// WithMissingGrace sets how long the file may be absent before its targets
// are removed (default [DefaultMissingGrace]). A mounted ConfigMap blinks
// while the kubelet swaps it, a volume remounts, an operator replaces the
// file: in that time the last good set stays, so sinks are not told to
// remove, and then re-create, everything. To remove every target at once,
// write a configuration with an empty list ("gitDefinitions: []").
func WithMissingGrace(d time.Duration) Option { return func(s *Source) { s.grace = max(d, 0) } }

// WithIDPrefix sets the prefix of target IDs. Default "configmap".
func WithIDPrefix(p string) Option { return func(s *Source) { s.prefix = p } }

// WithOnReload calls f after each reading of the file (at start and after
// each change of content), from the source's goroutine.
func WithOnReload(f func(Reload)) Option { return func(s *Source) { s.onReload = f } }

// WithOwnKeys names the top-level keys of the file the program reads
// itself (Numaplane's logLevel); any other key the package does not know
// is an error.
func WithOwnKeys(keys ...string) Option { return func(s *Source) { s.ownKeys = keys } }

// WithValues reads a keyValueGenerator.reference's files (see
// [GitValues]); without it, such a configuration is an error. The files
// are read at each change of the configuration and every refresh interval
// (see [WithValuesRefresh]).
func WithValues(v Values) Option { return func(s *Source) { s.values = v } }

// WithValuesRefresh sets how often a reference generator's files are read
// again (default 1m; 0 or less: only when the configuration changes).
func WithValuesRefresh(d time.Duration) Option { return func(s *Source) { s.refresh = d } }

// WithCredentials hands the program the credentials the configuration
// names (gitDefinition.repoCredential, the reference files'), before the
// targets that need them: the program resolves them, typically into the
// watcher's credential resolver (gitsync.Credentials.Set). An error makes
// the configuration unused, as a parse error does. Without it, a
// configuration that names a credential is an error.
func WithCredentials(set func([]spec.RepoCredential) error) Option {
	return func(s *Source) { s.creds = set }
}

// New returns a source reading the file at path.
func New(path string, opts ...Option) *Source {
	s := &Source{path: path, prefix: "configmap", debounce: 100 * time.Millisecond, grace: DefaultMissingGrace, log: logr.Discard(), onReload: func(Reload) {},
		refresh: time.Minute}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Run watches the file until ctx is done. It fails at once when the file's
// directory cannot be watched.
func (s *Source) Run(ctx context.Context, update func([]watcher.Target)) error {
	var (
		mu      sync.Mutex // orders the file watcher's calls and the grace timer's
		good    []watcher.Target
		loaded  bool        // a good set was handed over
		missing *time.Timer // the grace of a missing file, while it runs
		stopped bool
		last    []byte // the file as last read
		refresh bool   // it has a reference generator: its files are read again
	)
	load := func(data []byte, again bool) {
		ok, ref := s.load(ctx, data, again, &good, update)
		if ok {
			loaded, refresh = true, ref
		}
	}
	// A reference generator's files change without the file changing:
	// they are read again every refresh interval.
	defer every(ctx, s.refresh, &mu, func() {
		if refresh && loaded && last != nil && !stopped {
			load(last, true)
		}
	})()
	stopGrace := func() {
		if missing != nil {
			missing.Stop()
			missing = nil
		}
	}
	removeAll := func(why string) {
		good, loaded, last = nil, false, nil
		s.log.Error(errors.New(why), "configuration file absent: every target is removed", "path", s.path)
		update(nil)
		s.onReload(Reload{Removed: true})
	}
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		stopGrace()
	}()
	return filewatch.Watch(ctx, s.path, s.debounce, s.log, func(data []byte, err error) {
		mu.Lock()
		defer mu.Unlock()
		if !errors.Is(err, fs.ErrNotExist) {
			stopGrace()
		}
		switch {
		case errors.Is(err, fs.ErrNotExist) && !loaded:
			removeAll("no configuration has been read yet")
			return
		case errors.Is(err, fs.ErrNotExist):
			s.log.Error(err, "configuration file missing; the last good targets stay until the grace ends",
				"path", s.path, "targets", len(good), "grace", s.grace)
			s.onReload(Reload{Targets: good, Missing: true})
			var timer *time.Timer
			timer = time.AfterFunc(s.grace, func() {
				mu.Lock()
				defer mu.Unlock()
				if stopped || missing != timer {
					return // the file came back, or Run ended
				}
				missing = nil
				removeAll(fmt.Sprintf("missing for %s", s.grace))
			})
			missing = timer
			return
		case err != nil:
			err = fmt.Errorf("configmap: read %s: %w", s.path, err)
			s.log.Error(err, "configuration kept")
			s.onReload(Reload{Targets: good, Err: err})
			return
		}
		last = data
		load(data, false)
	})
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
	l, err := Load(ctx, data, LoadOptions{Prefix: s.prefix, OwnKeys: s.ownKeys, Values: s.values, Credentials: s.creds})
	if err != nil {
		if ctx.Err() != nil {
			return false, false
		}
		err = fmt.Errorf("%s: %w", s.path, err)
		s.log.Error(err, "configuration not used; the last good one stays", "targets", len(*good))
		s.onReload(Reload{Targets: *good, Err: err})
		return false, false
	}
	hasReference = l.Config.Source.KeyValueGenerator.Reference != nil
	if again && reflect.DeepEqual(l.Targets, *good) {
		return true, hasReference
	}
	*good = l.Targets
	if len(l.Targets) == 0 {
		s.log.Info("configuration is explicitly empty: every target is removed", "path", s.path)
	} else {
		s.log.Info("configuration loaded", "path", s.path, "targets", len(l.Targets), "reference", hasReference)
	}
	update(l.Targets)
	s.onReload(Reload{Targets: l.Targets, Data: data})
	return true, hasReference
}
