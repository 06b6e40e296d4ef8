package watcher

import (
	"context"
	"fmt"
	"reflect"
	"sync"

	"golang.org/x/sync/errgroup"
)

// ChainSink runs its steps in order for each change: a step runs only once
// the one before it succeeded (publish a tree, then run the hook that reads
// it). The watcher keeps one checkpoint for the chain. A failed step is
// retried, with the steps before it not run again for the same change; a
// new change starts from the first step.
//
// A step that is a [Reporter] has its report passed on: later steps find
// the reports of the steps before them with [StepReports], and the chain's
// report (in [Event.Result]) is the list of its steps' reports.
type ChainSink struct {
	name  string
	steps []Sink

	mu   sync.Mutex
	done map[string]chainProgress // by target ID
}

// chainProgress is how far a change went.
type chainProgress struct {
	// change says which change (To, From, Reason, Ref and Target), without
	// its trees: kept while a step fails, a tree would keep its packs.
	change  Change
	reports []any // of the steps that succeeded
}

var (
	_ Sink     = (*ChainSink)(nil)
	_ Reporter = (*ChainSink)(nil)
	_ Remover  = (*ChainSink)(nil)
	_ Runnable = (*ChainSink)(nil)
	_ Namer    = (*ChainSink)(nil)
)

// Chain returns a sink named name that runs steps in order.
func Chain(name string, steps ...Sink) *ChainSink {
	return &ChainSink{name: name, steps: steps, done: map[string]chainProgress{}}
}

// Name implements Namer.
func (c *ChainSink) Name() string { return c.name }

// Deliver implements Sink.
func (c *ChainSink) Deliver(ctx context.Context, ch Change) error {
	_, err := c.DeliverReport(ctx, ch)
	return err
}

// DeliverReport implements Reporter: it runs the steps from the first one
// this change has not passed.
func (c *ChainSink) DeliverReport(ctx context.Context, ch Change) (any, error) {
	c.mu.Lock()
	p, ok := c.done[ch.Target.ID]
	c.mu.Unlock()
	if !ok || !sameChange(p.change, ch) {
		p = chainProgress{change: ch}
		p.change.FS, p.change.Root = nil, nil
	}
	for i := len(p.reports); i < len(c.steps); i++ {
		step := c.steps[i]
		sctx := context.WithValue(ctx, stepReportsKey{}, append([]any(nil), p.reports...))
		var report any
		var err error
		if r, ok := step.(Reporter); ok {
			report, err = r.DeliverReport(sctx, ch)
		} else {
			err = step.Deliver(sctx, ch)
		}
		if err != nil {
			c.mu.Lock()
			c.done[ch.Target.ID] = p
			c.mu.Unlock()
			return append(p.reports, report), fmt.Errorf("%s: step %d (%s): %w", c.name, i+1, stepName(step), err)
		}
		p.reports = append(p.reports, report)
	}
	c.mu.Lock()
	delete(c.done, ch.Target.ID)
	c.mu.Unlock()
	return p.reports, nil
}

// sameChange reports whether b is a retry of a.
func sameChange(a, b Change) bool {
	return a.To == b.To && a.From == b.From && a.Reason == b.Reason && a.Ref == b.Ref &&
		reflect.DeepEqual(a.Target, b.Target)
}

// Remove implements Remover: the steps that are Removers, last first.
func (c *ChainSink) Remove(ctx context.Context, t Target) error {
	c.mu.Lock()
	delete(c.done, t.ID)
	c.mu.Unlock()
	for i := len(c.steps) - 1; i >= 0; i-- {
		if r, ok := as[Remover](c.steps[i]); ok {
			if err := r.Remove(ctx, t); err != nil {
				return fmt.Errorf("%s: remove, step %d (%s): %w", c.name, i+1, stepName(c.steps[i]), err)
			}
		}
	}
	return nil
}

// Run implements Runnable: it runs the steps that are Runnable.
func (c *ChainSink) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, s := range c.steps {
		if r, ok := as[Runnable](s); ok {
			g.Go(func() error { return r.Run(gctx) })
		}
	}
	return g.Wait()
}

type stepReportsKey struct{}

// StepReports returns, to a step of a [ChainSink], the reports of the steps
// before it for the same change, in order (nil for a step that reports
// nothing); outside a chain it returns nil.
func StepReports(ctx context.Context) []any {
	r, _ := ctx.Value(stepReportsKey{}).([]any)
	return r
}

// stepName names a step in messages: its name, or its type (a step needs no
// name: the chain has one checkpoint).
func stepName(s Sink) string {
	if n, err := sinkName(s); err == nil {
		return n
	}
	return fmt.Sprintf("%T", s)
}
