// Command child is one measured process of the benchmarks: what a program
// that embeds the library does, and nothing else, so that its peak memory
// is the library's and not a benchmark's (the benchmark programs link a
// webhook server, a git server and their tables; this links the watcher).
//
//	child sync  -url U -dir D   a watcher's cold first sync: run until the
//	                            first delivery of U's "app" into cache D
//	child fetch -url U -dir D   a watcher's incremental fetch: list U's main
//	                            branch and fetch it into the mirror D, as a
//	                            poll does
//
// With CHILD_PROFILE set it writes CPU and allocation profiles (every
// allocation) to that prefix + .cpu/.heap.
package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/mirror"
	"github.com/modwatch/modwatch/internal/dev/bench/harness"
	"github.com/modwatch/modwatch/source/static"
	"github.com/modwatch/modwatch/watcher"
)

func main() {
	if len(os.Args) != 6 || os.Args[2] != "-url" || os.Args[4] != "-dir" {
		fmt.Fprintln(os.Stderr, "usage: child sync|fetch -url URL -dir DIR")
		os.Exit(2)
	}
	if p := os.Getenv("CHILD_PROFILE"); p != "" {
		runtime.MemProfileRate = 1
		stop, err := harness.Profile(p)
		if err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		defer stop()
	}
	if err := run(os.Args[1], os.Args[3], os.Args[5]); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
}

func run(mode, url, dir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	switch mode {
	case "fetch":
		m, err := mirror.Open(dir, url, mirror.Options{})
		if err != nil {
			return err
		}
		const ref = "refs/heads/main"
		refs, err := gitutil.ListRefs(ctx, url, nil, []string{ref})
		if err != nil {
			return err
		}
		h, ok := refs.Refs[ref]
		if !ok {
			return fmt.Errorf("%s has no %s", url, ref)
		}
		_, err = m.FetchListed(ctx, nil, map[string]gitutil.Hash{ref: h})
		return err
	case "sync":
		done := make(chan struct{})
		w := watcher.New(watcher.WithCacheDir(dir))
		var once sync.Once
		sink := watcher.Named("done", watcher.SinkFunc(func(context.Context, watcher.Change) error { once.Do(func() { close(done) }); return nil }))
		if err := w.Route(static.New(watcher.Target{ID: "t", URL: url, Path: "app"}), sink); err != nil {
			return err
		}
		ctx, stop := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() { errc <- w.Run(ctx) }()
		select {
		case <-done:
		case err := <-errc:
			stop()
			return fmt.Errorf("watcher stopped: %v", err)
		}
		stop()
		return <-errc
	}
	return fmt.Errorf("unknown mode %q", mode)
}
