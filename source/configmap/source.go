// Package configmap is a source that reads the control repositories from a
// file mounted from a ConfigMap (Numaplane's agent configuration), and
// follows the file as it changes.
//
// The file's directory is watched with fsnotify, which sees every way the
// file is replaced: the kubelet's atomic update of a mounted ConfigMap (a
// new timestamped directory, then the ..data symlink swapped), an editor's
// write-and-rename, a plain write. Events are debounced, and the file is
// parsed again only when its content changed.
//
// A file that cannot be parsed, templated or validated keeps the last good
// targets in place and is reported; the source never hands the watcher an
// empty set because of a bad file. A deleted file removes the targets.
package configmap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"

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
	return WatchFile(ctx, s.path, s.debounce, s.log, func(data []byte, err error) {
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

// WatchFile calls onChange with the content of the file at path when it
// starts and each time the content changes, until ctx is done; err is
// fs.ErrNotExist (wrapped) while there is no file, or why it could not be
// read. It watches the file's directory with fsnotify, so that it sees the
// file replaced in any way (the kubelet's ..data symlink swap, an editor's
// rename, a plain write), and reads the file once the directory has been
// quiet for debounce. It fails at once when the directory cannot be
// watched. onChange is called from WatchFile's goroutine.
func WatchFile(ctx context.Context, path string, debounce time.Duration, log logr.Logger, onChange func(data []byte, err error)) error {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("configmap: %w", err)
	}
	defer fw.Close()
	dir := filepath.Dir(path)
	if err := fw.Add(dir); err != nil {
		return fmt.Errorf("configmap: watch %s: %w", dir, err)
	}

	var (
		read    bool   // the file was read at least once
		missing bool   // it was missing then
		last    []byte // what was read
	)
	reload := func() {
		data, err := os.ReadFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if read && missing {
				return
			}
			read, missing, last = true, true, nil
		case err != nil:
		case read && !missing && bytes.Equal(data, last):
			return
		default:
			read, missing, last = true, false, data
		}
		onChange(data, err)
	}
	reload()
	timer := time.NewTimer(debounce)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-fw.Events:
			if !ok {
				return nil
			}
			// Any event in the directory may be the file changing (through a
			// symlink swap it is not even named): read it once things settle.
			timer.Reset(debounce)
		case err, ok := <-fw.Errors:
			if !ok {
				return nil
			}
			// An overflow loses events: read the file to be sure.
			log.Error(err, "watching a file", "dir", dir)
			timer.Reset(debounce)
		case <-timer.C:
			reload()
		}
	}
}
