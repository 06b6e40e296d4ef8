package watcher_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-logr/logr"

	"github.com/modwatch/modwatch/source/static"
	"github.com/modwatch/modwatch/watcher"
)

// manifestCounter is a sink written from scratch: it reads the tree it is
// handed and reports how many manifests the target's path holds.
type manifestCounter struct{}

// Name makes it a Namer: its name in logs, events and checkpoint keys.
func (manifestCounter) Name() string { return "counter" }

// Deliver acts on one change. c.FS is the target's path at c.To, read
// from the watcher's mirror; it cannot reach outside that path.
func (manifestCounter) Deliver(ctx context.Context, c watcher.Change) error {
	n := 0
	err := fs.WalkDir(c.FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && path.Ext(p) == ".yaml" {
			n++
		}
		return err
	})
	if err != nil {
		return err // retried with backoff; the checkpoint does not advance
	}
	fmt.Printf("%s (%s): %d manifests\n", c.Target.ID, c.Reason, n)
	return nil
}

// A sink is one method, Deliver; a Name makes it a Namer. The watcher
// hands it each change of its targets, one at a time per target, latest
// first when it falls behind, and again after an error.
func ExampleSink() {
	url, cleanup := exampleRepo(map[string]string{
		"deploy/app.yaml": "kind: Deployment\n",
		"deploy/svc.yaml": "kind: Service\n",
		"README.md":       "not under deploy/\n",
	})
	defer cleanup()

	runUntilDelivered(1, static.New(watcher.Target{ID: "app", URL: url, Path: "deploy"}), manifestCounter{})
	// Output:
	// app (Initial): 2 manifests
}

// teamsSource is a source written from scratch: one target per team that
// names() lists, in the team's folder of the repository at url, asked again
// every interval (a real source watches what it reads).
func teamsSource(url string, every time.Duration, names func() ([]string, error)) watcher.Source {
	return watcher.SourceFunc(func(ctx context.Context, update func([]watcher.Target)) error {
		for {
			if teams, err := names(); err != nil { // no set, never an empty one: the watcher keeps the last
				logr.FromContextOrDiscard(ctx).Error(err, "teams unreadable")
			} else {
				targets := make([]watcher.Target, 0, len(teams))
				for _, team := range teams {
					targets = append(targets, watcher.Target{ID: "team-" + team, URL: url, Path: "teams/" + team})
				}
				update(targets) // level-based: the whole set, every time
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(every):
			}
		}
	})
}

// A source is one method, Run: it hands the watcher the whole desired set
// of targets at start and each time it changes, and returns when ctx ends.
// SourceFunc makes one of a function.
func ExampleSourceFunc() {
	url, cleanup := exampleRepo(map[string]string{"teams/a/app.yaml": "a\n", "teams/b/app.yaml": "b\n"})
	defer cleanup()

	names := func() ([]string, error) { return []string{"a", "b"}, nil }
	var mu sync.Mutex
	seen := map[string]bool{}
	sink := watcher.SinkFunc(func(ctx context.Context, c watcher.Change) error {
		mu.Lock()
		defer mu.Unlock()
		if seen[c.Target.ID] = true; len(seen) == 2 {
			fmt.Println("delivered to team-a and team-b")
		}
		return nil
	})
	runUntilDelivered(2, teamsSource(url, time.Second, names), sink)
	// Output:
	// delivered to team-a and team-b
}

// Decorate puts behaviour around a sink without writing a new one: a log
// line, a filter, a dry run. The decorated sink keeps the inner one's
// name, Remove, Run and report.
func ExampleDecorate() {
	url, cleanup := exampleRepo(map[string]string{"deploy/app.yaml": "kind: Deployment\n"})
	defer cleanup()

	inner := manifestCounter{}
	logged := watcher.Decorate(inner, func(ctx context.Context, c watcher.Change, next watcher.NextFunc) (any, error) {
		fmt.Printf("delivering %s to %s\n", c.Target.ID, inner.Name())
		return next(ctx, c)
	})
	runUntilDelivered(1, static.New(watcher.Target{ID: "app", URL: url, Path: "deploy"}), logged)
	// Output:
	// delivering app to counter
	// app (Initial): 1 manifests
}

// runUntilDelivered runs a watcher of source and sink until n deliveries
// were made, then stops it and waits for Run to return.
func runUntilDelivered(n int, source watcher.Source, sink watcher.Sink) {
	cache, err := os.MkdirTemp("", "modwatch-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(cache)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	delivered := make(chan struct{})
	count := watcher.ObserverFunc(func(e watcher.Event) {
		mu.Lock()
		defer mu.Unlock()
		if e.Type == watcher.EventDelivered {
			if n--; n == 0 {
				close(delivered)
			}
		}
	})
	w := watcher.New(watcher.WithCacheDir(cache), watcher.WithLocalRepositories(), watcher.WithObserver(count))
	if err := w.Route(source, sink); err != nil {
		panic(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	select {
	case <-delivered:
	case err := <-errc:
		panic(fmt.Sprint("the watcher stopped: ", err))
	}
	cancel()
	if err := <-errc; err != nil {
		panic(err)
	}
}

// exampleRepo makes a repository of one commit holding files, and returns
// its file:// URL.
func exampleRepo(files map[string]string) (url string, cleanup func()) {
	dir, err := os.MkdirTemp("", "modwatch-example-repo-")
	if err != nil {
		panic(err)
	}
	repo, err := git.PlainInit(dir, false)
	if err != nil {
		panic(err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		panic(err)
	}
	for name, text := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			panic(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			panic(err)
		}
		if _, err := wt.Add(name); err != nil {
			panic(err)
		}
	}
	sig := &object.Signature{Name: "example", Email: "example@example.com", When: time.Unix(1700000000, 0)}
	if _, err := wt.Commit("example", &git.CommitOptions{Author: sig, Committer: sig}); err != nil {
		panic(err)
	}
	return "file://" + dir, func() { os.RemoveAll(dir) }
}
