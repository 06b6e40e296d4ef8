package configmap

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/modwatch/modwatch/internal/filewatch"
	"github.com/modwatch/modwatch/watcher"
)

// Reload is the outcome of reading the file after it changed.
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

// New returns a source reading the file at path.
func New(path string, opts ...Option) *Source {
	s := &Source{path: path, prefix: "configmap", debounce: 100 * time.Millisecond, grace: DefaultMissingGrace, log: logr.Discard(), onReload: func(Reload) {}}
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
	)
	stopGrace := func() {
		if missing != nil {
			missing.Stop()
			missing = nil
		}
	}
	removeAll := func(why string) {
		good, loaded = nil, false
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
		targets, err := Parse(data, s.prefix)
		if err != nil {
			err = fmt.Errorf("%s: %w", s.path, err)
			s.log.Error(err, "configuration not used; the last good one stays", "targets", len(good))
			s.onReload(Reload{Targets: good, Err: err})
			return
		}
		good, loaded = targets, true
		if len(targets) == 0 {
			s.log.Info("configuration is explicitly empty: every target is removed", "path", s.path)
		} else {
			s.log.Info("configuration loaded", "path", s.path, "targets", len(targets))
		}
		update(targets)
		s.onReload(Reload{Targets: targets})
	})
}
