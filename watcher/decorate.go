package watcher

import (
	"context"
	"errors"
	"fmt"
)

// Wrapper is a sink that wraps another: a decorator. Where the wrapper
// does not do something itself, the watcher (and [Chain]) looks through
// Unwrap for it, as net/http's ResponseController does: the name
// ([Namer]), [Remover] and [Runnable]. So wrapping a sink neither changes
// its checkpoints nor drops its cleanup. A [Reporter] is not looked for
// through Unwrap, since that would skip the wrapper's Deliver: a
// decorator made with [Decorate] reports what the sink it wraps reports.
type Wrapper interface {
	Unwrap() Sink
}

// as finds what s does, itself or through the sinks it wraps.
func as[T any](s Sink) (T, bool) {
	for s != nil {
		if v, ok := s.(T); ok {
			return v, true
		}
		w, ok := s.(Wrapper)
		if !ok {
			break
		}
		s = w.Unwrap()
	}
	var zero T
	return zero, false
}

// NextFunc delivers to the wrapped sink; report is what it reports, when
// it is a [Reporter].
type NextFunc func(ctx context.Context, c Change) (report any, err error)

// Decorate wraps s in around. Each delivery goes through around, which
// calls next to reach s (or does not: a filter, a dry run). The sink
// keeps what s does: its name, Remove and Run (see [Wrapper]), and its
// report.
//
//	logged := watcher.Decorate(applier, func(ctx context.Context, c watcher.Change, next watcher.NextFunc) (any, error) {
//		log.Info("applying", "target", c.Target.ID, "commit", c.To.String())
//		return next(ctx, c)
//	})
//
// A nil around passes every delivery through.
func Decorate(s Sink, around func(ctx context.Context, c Change, next NextFunc) (report any, err error)) Sink {
	if around == nil {
		around = passThrough
	}
	return &decorated{inner: s, around: around}
}

type decorated struct {
	inner  Sink
	around func(ctx context.Context, c Change, next NextFunc) (any, error)
}

var (
	_ Wrapper  = (*decorated)(nil)
	_ Reporter = (*decorated)(nil)
)

func (d *decorated) Unwrap() Sink { return d.inner }

func (d *decorated) Deliver(ctx context.Context, c Change) error {
	_, err := d.DeliverReport(ctx, c)
	return err
}

func (d *decorated) DeliverReport(ctx context.Context, c Change) (any, error) {
	return d.around(ctx, c, func(ctx context.Context, c Change) (any, error) {
		if r, ok := d.inner.(Reporter); ok {
			return r.DeliverReport(ctx, c)
		}
		return nil, d.inner.Deliver(ctx, c)
	})
}

// Named gives s a name, which is its checkpoint's key in a route: two
// sinks of one route must be named apart, and a sink that is not a
// [Namer] (a [SinkFunc]) must be named. The sink keeps everything else s
// does (see [Wrapper]).
func Named(name string, s Sink) Sink {
	return &named{decorated: decorated{inner: s, around: passThrough}, name: name}
}

type named struct {
	decorated
	name string
}

func (n *named) Name() string { return n.name }

func passThrough(ctx context.Context, c Change, next NextFunc) (any, error) { return next(ctx, c) }

// ErrUnnamedSink is returned by Route for a sink with no name beside other
// sinks, and for two sinks of one route with the same name: a sink's name
// keys its checkpoints, so it must not depend on the order of the sinks.
// A route's only sink needs none (see [DefaultSinkName]).
var ErrUnnamedSink = errors.New("watcher: sink needs a name of its own in its route")

// DefaultSinkName is the name of a route's only sink when it has none of
// its own (a plain SinkFunc): its checkpoints are kept under it.
const DefaultSinkName = "sink"

// sinkName is s's name: its own or, through Unwrap, the wrapped sink's.
func sinkName(s Sink) (string, error) {
	if n, ok := as[Namer](s); ok && n.Name() != "" {
		return n.Name(), nil
	} else if ok {
		return "", fmt.Errorf("%w: %T's name is empty", ErrUnnamedSink, s)
	}
	return "", fmt.Errorf("%w: %T is not a Namer; use watcher.Named", ErrUnnamedSink, s)
}
