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
	s.targets = slices.Clone(targets)
	s.mu.Unlock()
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// Run implements watcher.Source.
func (s *Source) Run(ctx context.Context, update func([]watcher.Target)) error {
	for {
		s.mu.Lock()
		ts := s.targets // Set replaces it, never changes it
		s.mu.Unlock()
		update(ts)
		select {
		case <-ctx.Done():
			return nil
		case <-s.changed:
		}
	}
}
