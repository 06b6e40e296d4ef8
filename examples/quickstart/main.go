// Command quickstart watches one path of a git repository and publishes it
// into a directory.
//
// With no flags it runs a self-contained demo: it creates a repository in a
// temporary directory, serves it over smart HTTP on loopback, makes commits
// (one outside the watched path, which is not delivered) and prints what was
// delivered, then exits. With -repo it watches that repository until
// interrupted:
//
//	go run ./examples/quickstart
//	go run ./examples/quickstart -repo https://github.com/stefanprodan/podinfo -path kustomize -out /tmp/podinfo
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/modwatch/modwatch/sink/dir"
	"github.com/modwatch/modwatch/source/static"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/metrics"
)

func main() {
	repo := flag.String("repo", "", "repository URL to watch (empty: run the embedded demo)")
	revision := flag.String("revision", "", "branch, tag, full SHA or semver range (empty: the remote's HEAD)")
	path := flag.String("path", "", "directory inside the repository to watch (empty: all)")
	out := flag.String("out", "", "directory to publish into (default: a temporary directory)")
	interval := flag.Duration("interval", time.Minute, "poll interval")
	verbose := flag.Bool("v", false, "log every poll")
	metricsAddr := flag.String("metrics-addr", "", "serve /metrics and /healthz here (with -repo)")
	flag.Parse()

	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug - 1
	}
	log := logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	var err error
	if *repo == "" {
		err = demo(ctx, log)
	} else {
		err = watch(ctx, log, watcher.Target{ID: "quickstart", URL: *repo, Revision: *revision, Path: *path}, *out, *interval, *metricsAddr)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// watch is the whole embedding: a source, a sink, a watcher, and metrics
// when asked for.
func watch(ctx context.Context, log logr.Logger, t watcher.Target, out string, interval time.Duration, metricsAddr string) error {
	if out == "" {
		var err error
		if out, err = os.MkdirTemp("", "modwatch-out-"); err != nil {
			return err
		}
	}
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		return err
	}
	publish := dir.New(out)
	w := watcher.New(watcher.WithInterval(interval), watcher.WithObserver(printer(nil), m))
	if err := w.Route(static.New(t), publish); err != nil {
		return err
	}
	if err := m.CollectStats(w); err != nil {
		return err
	}
	if metricsAddr != "" {
		go serveMetrics(ctx, metricsAddr, reg, w)
	}
	fmt.Printf("watching %s, publishing to %s\n", t.URL, publish.Path(t))
	return w.Run(logr.NewContext(ctx, log))
}

// serveMetrics serves /metrics and /healthz (ready once every source has
// given its targets) until ctx ends.
func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry, w *watcher.Watcher) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(rw http.ResponseWriter, _ *http.Request) {
		if !w.Stats().Synced {
			http.Error(rw, "sources not synced yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(rw, "ok")
	})
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "quickstart: metrics:", err)
	}
}

// printer is an observer that prints one line per delivery and per commit
// skipped because the watched path did not change, and passes the events
// on to also, when set.
func printer(also chan<- watcher.Event) watcher.Observer {
	return watcher.ObserverFunc(func(e watcher.Event) {
		switch e.Type {
		case watcher.EventDelivered:
			c := e.Change
			fmt.Printf("delivered %s to %s: %s at %.12s (%s), changed %v\n", c.Target.ID, e.Sink, c.Ref, c.To, c.Reason, c.Paths)
		case watcher.EventUpToDate:
			fmt.Printf("not delivered %.12s: nothing under %q changed\n", e.Commit, e.Target.Path)
		default:
			return
		}
		select {
		case also <- e: // a nil channel never receives: skipped
		default:
		}
	})
}
