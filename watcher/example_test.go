package watcher_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/go-logr/logr"

	"github.com/modwatch/modwatch/sink/dir"
	"github.com/modwatch/modwatch/sink/hook"
	"github.com/modwatch/modwatch/source/static"
	"github.com/modwatch/modwatch/watcher"
)

// A program's wiring: one source, one chain of sinks. (Compiled, not run:
// it watches a public repository until interrupted.)
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, logr.Discard()); err != nil { // your logr.Logger
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log logr.Logger) error {
	ctx = logr.NewContext(ctx, log) // the logger comes with ctx, as in controller-runtime
	w := watcher.New(
		watcher.WithCacheDir("/var/cache/modwatch"), // one bare mirror per remote
		watcher.WithInterval(time.Minute),
	)
	err := w.Route(
		static.New(watcher.Target{ID: "podinfo", URL: "https://github.com/stefanprodan/podinfo", Revision: "master", Path: "kustomize"}),
		// In order: the hook runs in the new tree once it is published.
		watcher.Chain("publish", dir.New("/srv/manifests"), hook.Command("/usr/local/bin/reload", nil)),
	)
	if err != nil {
		return err // e.g. two sinks of a route with one name
	}
	return w.Run(ctx) // blocks until ctx ends; every goroutine has stopped when it returns
}

// A target is checked where it enters the watcher: a hostile URL, path or
// revision is refused with the field it is wrong in.
func ExampleTarget_Validate() {
	for _, t := range []watcher.Target{
		{ID: "ok", URL: "https://github.com/stefanprodan/podinfo", Revision: ">=6.0.0", Path: "kustomize"},
		{ID: "escape", URL: "https://github.com/stefanprodan/podinfo", Path: "../../etc"},
		{ID: "transport", URL: "ext::git-remote-evil"},
		{ID: "option", URL: "https://github.com/stefanprodan/podinfo", Revision: "--upload-pack=touch"},
		{ID: "paths", URL: "https://github.com/stefanprodan/podinfo", Paths: []string{"kustomize", "../secrets"}},
		{ID: "ignore", URL: "https://github.com/stefanprodan/podinfo", Ignore: []string{"*.png", "a\x00b"}},
	} {
		fmt.Printf("%s: %v\n", t.ID, t.Validate())
	}
	// Output:
	// ok: <nil>
	// escape: watcher: invalid target escape: path: mirror: invalid path: "../../etc" contains ".."
	// transport: watcher: invalid target transport: url: gitutil: invalid repository URL: "ext::git-remote-evil": "transport::" remotes are refused
	// option: watcher: invalid target option: revision: revision "--upload-pack=touch": gitutil: invalid revision: a name or path segment starting with "-"
	// paths: watcher: invalid target paths: paths: mirror: invalid path: "../secrets" contains ".."
	// ignore: watcher: invalid target ignore: ignore: mirror: invalid selection: ignore pattern "a\x00b" holds a NUL byte or a newline
}
