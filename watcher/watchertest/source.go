package watchertest

import (
	"context"
	"slices"
	"sync"

	"github.com/modwatch/modwatch/watcher"
)

// Source is a watcher.Source whose target set a test sets at will.
type Source struct {
	mu      sync.Mutex
	targets []watcher.Target
	noSet   error // set: it cannot give its set (watcher.NoSet)
	changed chan struct{}
}

var _ watcher.Source = (*Source)(nil)

// NewSource returns a Source that starts with targets.
func NewSource(targets ...watcher.Target) *Source {
	return &Source{targets: slices.Clone(targets), changed: make(chan struct{}, 1)}
}

// Set replaces the whole target set; the running watcher sees it at once.
func (s *Source) Set(targets ...watcher.Target) {
	s.mu.Lock()
	s.targets, s.noSet = slices.Clone(targets), nil
	s.mu.Unlock()
	s.wake()
}

// NoSet makes the source unable to give its set, for err (a file missing,
// a list forbidden), as watcher.NoSet says, until the next Set. Called
// before the watcher runs, the source gives no first set.
func (s *Source) NoSet(err error) {
	s.mu.Lock()
	s.noSet = err
	s.mu.Unlock()
	s.wake()
}

func (s *Source) wake() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// Run implements watcher.Source.
func (s *Source) Run(ctx context.Context, update func([]watcher.Target)) error {
	for {
		s.mu.Lock()
		ts, err := s.targets, s.noSet // Set replaces them, never changes them
		s.mu.Unlock()
		if err != nil {
			watcher.NoSet(ctx, err)
		} else {
			update(ts)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.changed:
		}
	}
}
