package configmap

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
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
	// Removed says the file is gone (Targets is empty).
	Removed bool
}

// Source reads targets from a mounted ConfigMap file.
type Source struct {
	path     string
	prefix   string
	debounce time.Duration
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

// WithIDPrefix sets the prefix of target IDs. Default "configmap".
func WithIDPrefix(p string) Option { return func(s *Source) { s.prefix = p } }

// WithOnReload calls f after each reading of the file (at start and after
// each change of content), from the source's goroutine.
func WithOnReload(f func(Reload)) Option { return func(s *Source) { s.onReload = f } }

// New returns a source reading the file at path.
func New(path string, opts ...Option) *Source {
	s := &Source{path: path, prefix: "configmap", debounce: 100 * time.Millisecond, log: logr.Discard(), onReload: func(Reload) {}}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Run watches the file until ctx is done. It fails at once when the file's
// directory cannot be watched.
func (s *Source) Run(ctx context.Context, update func([]watcher.Target)) error {
	var good []watcher.Target
	return filewatch.Watch(ctx, s.path, s.debounce, s.log, func(data []byte, err error) {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			good = nil
			s.log.Info("configuration removed: no targets", "path", s.path)
			update(nil)
			s.onReload(Reload{Removed: true})
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
		good = targets
		s.log.Info("configuration loaded", "path", s.path, "targets", len(targets))
		update(targets)
		s.onReload(Reload{Targets: targets})
	})
}
