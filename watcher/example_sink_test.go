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

	"github.com/modwatch/modwatch/source/static"
	"github.com/modwatch/modwatch/watcher"
)

// manifestCounter is a sink written from scratch: it reads the tree it is
// handed and reports how many manifests the target's path holds.
type manifestCounter struct {
	done func() // the example's: the delivery it waits for happened
}

// Name makes it a Namer: its name in logs, events and checkpoint keys.
func (manifestCounter) Name() string { return "counter" }

// Deliver acts on one change. c.FS is the target's path at c.To, read
// from the watcher's mirror; it cannot reach outside that path.
func (s manifestCounter) Deliver(ctx context.Context, c watcher.Change) error {
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
	s.done()
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

	runUntilDelivered(func(done func()) (watcher.Source, watcher.Sink) {
		return static.New(watcher.Target{ID: "app", URL: url, Path: "deploy"}), manifestCounter{done: done}
	})
	// Output:
	// app (Initial): 2 manifests
}

// A source is one method, Run: it hands the watcher the whole desired set
// of targets at start and each time it changes, and returns when ctx ends.
// SourceFunc makes one of a function; here the set comes from teams, asked
// again every second (a real source watches what it reads).
func ExampleSourceFunc() {
	url, cleanup := exampleRepo(map[string]string{"teams/a/app.yaml": "a\n", "teams/b/app.yaml": "b\n"})
	defer cleanup()

	teams := func() []watcher.Target {
		return []watcher.Target{
			{ID: "team-a", URL: url, Path: "teams/a"},
			{ID: "team-b", URL: url, Path: "teams/b"},
		}
	}
	runUntilDelivered(func(done func()) (watcher.Source, watcher.Sink) {
		source := watcher.SourceFunc(func(ctx context.Context, update func([]watcher.Target)) error {
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				update(teams()) // level-based: the whole set, every time
				select {
				case <-ctx.Done():
					return nil
				case <-tick.C:
				}
			}
		})
		var mu sync.Mutex
		seen := map[string]bool{}
		sink := watcher.SinkFunc(func(ctx context.Context, c watcher.Change) error {
			mu.Lock()
			defer mu.Unlock()
			seen[c.Target.ID] = true
			if len(seen) == 2 {
				fmt.Println("delivered to team-a and team-b")
				done()
			}
			return nil
		})
		return source, sink
	})
	// Output:
	// delivered to team-a and team-b
}

// Decorate puts behaviour around a sink without writing a new one: a log
// line, a filter, a dry run. The decorated sink keeps the inner one's
// name, Remove, Run and report.
func ExampleDecorate() {
	url, cleanup := exampleRepo(map[string]string{"deploy/app.yaml": "kind: Deployment\n"})
	defer cleanup()

	runUntilDelivered(func(done func()) (watcher.Source, watcher.Sink) {
		inner := manifestCounter{done: done}
		logged := watcher.Decorate(inner, func(ctx context.Context, c watcher.Change, next watcher.NextFunc) (any, error) {
			fmt.Printf("delivering %s to %s\n", c.Target.ID, inner.Name())
			return next(ctx, c)
		})
		return static.New(watcher.Target{ID: "app", URL: url, Path: "deploy"}), logged
	})
	// Output:
	// delivering app to counter
	// app (Initial): 1 manifests
}

// runUntilDelivered runs a watcher over what wire returns until its sink
// calls done, then stops it and waits for Run to return.
func runUntilDelivered(wire func(done func()) (watcher.Source, watcher.Sink)) {
	cache, err := os.MkdirTemp("", "modwatch-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(cache)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var once sync.Once
	delivered := make(chan struct{})
	source, sink := wire(func() { once.Do(func() { close(delivered) }) })

	w := watcher.New(watcher.WithCacheDir(cache), watcher.WithLocalRepositories())
	w.Route(source, sink)
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
