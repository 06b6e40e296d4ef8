package webhook

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-logr/logr"

	"github.com/modwatch/modwatch/internal/backoff"
)

// Stream is a long-lived subscription to push notifications for a set of
// repositories (the GitLab agent's subscription to kas is the model).
type Stream interface {
	// Subscribe blocks while the subscription lasts, calling hint with a
	// repository URL for each notification. It returns nil when the server
	// ends the stream cleanly and an error when it fails; it returns when
	// ctx ends.
	Subscribe(ctx context.Context, repos []string, hint func(repoURL string)) error
}

// StreamFunc adapts a function to [Stream].
type StreamFunc func(ctx context.Context, repos []string, hint func(repoURL string)) error

// Subscribe calls f.
func (f StreamFunc) Subscribe(ctx context.Context, repos []string, hint func(string)) error {
	return f(ctx, repos, hint)
}

// Watched is what a Subscriber follows and hints: *watcher.Watcher.
type Watched interface {
	Triggerer
	// Remotes returns the watched repository URLs and a channel closed
	// when they next change.
	Remotes() (urls []string, changed <-chan struct{})
}

// Subscriber keeps one subscription of a Stream for the whole set of
// repositories a watcher polls: it resubscribes only when that set really
// changes (debounced), reconnects at once when the server ends the stream
// cleanly, and backs off exponentially, with jitter, when it fails.
type Subscriber struct {
	stream   Stream
	w        Watched
	debounce time.Duration
	retryMin time.Duration
	retryMax time.Duration
	log      logr.Logger
}

// SubscriberConfig configures a Subscriber. A zero field keeps its
// default.
type SubscriberConfig struct {
	// Debounce is how long the set of repositories must stay unchanged
	// before the subscription is restarted (default 1s; negative: none).
	Debounce time.Duration `json:"debounce,omitempty"`
	// RetryMin and RetryMax bound the exponential backoff, with jitter,
	// before reconnecting after a failure (default 1s and 2m).
	RetryMin time.Duration `json:"retryMin,omitempty"`
	RetryMax time.Duration `json:"retryMax,omitempty"`
}

// Default fills in what is left at zero; a negative Debounce means none.
func (c *SubscriberConfig) Default() {
	switch {
	case c.Debounce == 0:
		c.Debounce = time.Second
	case c.Debounce < 0:
		c.Debounce = 0
	}
	if c.RetryMin == 0 {
		c.RetryMin = time.Second
	}
	if c.RetryMax == 0 {
		c.RetryMax = 2 * time.Minute
	}
}

// Validate checks the configuration once defaulted: no negative retry
// bound, and RetryMax not under RetryMin.
func (c SubscriberConfig) Validate() error {
	switch {
	case c.RetryMin < 0 || c.RetryMax < 0:
		return errors.New("webhook: subscriber retryMin and retryMax cannot be negative")
	case c.RetryMax < c.RetryMin:
		return fmt.Errorf("webhook: subscriber retryMax %s is under retryMin %s", c.RetryMax, c.RetryMin)
	}
	return nil
}

// NewSubscriber returns a Subscriber of stream for w's repositories. Run
// takes the logger from its ctx.
func NewSubscriber(stream Stream, w Watched, cfg SubscriberConfig) (*Subscriber, error) {
	cfg.Default()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Subscriber{stream: stream, w: w, debounce: cfg.Debounce, retryMin: cfg.RetryMin, retryMax: cfg.RetryMax, log: logr.Discard()}, nil
}

// Run subscribes until ctx ends, then returns nil. The subscription's
// goroutine has stopped when it returns.
func (s *Subscriber) Run(ctx context.Context) error {
	s.log = logr.FromContextOrDiscard(ctx).WithName("stream")
	failures := 0
	for {
		repos, changed := s.w.Remotes()
		if len(repos) == 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-changed:
				continue
			}
		}
		next, ok, err := s.subscribe(ctx, repos, changed)
		if !ok {
			return nil
		}
		switch {
		case next:
			failures = 0 // the set changed: resubscribe now
		case err == nil:
			failures = 0
			s.log.V(1).Info("stream ended; reconnecting")
		default:
			failures++
			wait := backoff.Delay(failures, s.retryMin, s.retryMax)
			s.log.Error(err, "stream failed", "failures", failures, "retryIn", wait)
			timer := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
				return nil
			case <-timer.C:
			}
		}
	}
}

// subscribe runs one subscription. It returns with next set when the set
// of repositories changed, with the stream's error when the stream ended,
// and ok false when ctx ended.
func (s *Subscriber) subscribe(ctx context.Context, repos []string, changed <-chan struct{}) (next, ok bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- s.stream.Subscribe(sctx, repos, s.hint) }()
	for {
		select {
		case <-ctx.Done():
			cancel()
			<-errc
			return false, false, nil
		case err := <-errc:
			return false, true, err
		case <-changed:
			now, ch, settled := s.settle(ctx, changed)
			if !settled {
				cancel()
				<-errc
				return false, false, nil
			}
			if !slices.Equal(now, repos) {
				cancel()
				<-errc
				return true, true, nil
			}
			changed = ch
		}
	}
}

// settle waits until the set of repositories has not changed for the
// debounce period and returns it.
func (s *Subscriber) settle(ctx context.Context, changed <-chan struct{}) ([]string, <-chan struct{}, bool) {
	timer := time.NewTimer(s.debounce)
	defer timer.Stop()
	for {
		repos, next := s.w.Remotes()
		select {
		case <-ctx.Done():
			return nil, nil, false
		case <-timer.C:
			return repos, next, true
		case <-next:
			timer.Reset(s.debounce)
		}
	}
}

func (s *Subscriber) hint(repoURL string) {
	watched := s.w.Trigger(repoURL)
	s.log.V(1).Info("stream hint", "url", repoURL, "watched", watched)
}
