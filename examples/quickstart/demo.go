package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/sink/dir"
	"github.com/modwatch/modwatch/source/static"
	"github.com/modwatch/modwatch/watcher"
)

// demo runs the watcher against a repository it creates and serves itself.
func demo(ctx context.Context, log logr.Logger) (err error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	env := &gittest.Standalone{}
	defer env.Close()
	defer env.Recover(&err)

	srv := gittest.NewServer(env)
	repo := srv.NewRepo(env, "demo/app")
	first := repo.Commit(env, "initial",
		gittest.File("deploy/configmap.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: demo}\ndata: {greeting: hello}\n"),
		gittest.File("docs/README.md", "# demo\n"))
	fmt.Printf("serving a demo repository at %s\n", repo.URL())

	out := env.TempDir()
	publish := dir.New(out)
	events := make(chan watcher.Event, 8)
	target := watcher.Target{ID: "demo", URL: repo.URL(), Revision: "main", Path: "deploy"}

	w := watcher.New(
		watcher.WithCacheDir(env.TempDir()),
		watcher.WithInterval(time.Hour), // the demo pokes the watcher with Trigger instead
		watcher.WithObserver(printer(events)),
	)
	if err := w.Route(static.New(target), publish); err != nil {
		return err
	}
	runErr := make(chan error, 1)
	go func() { runErr <- w.Run(logr.NewContext(ctx, log)) }()
	defer func() {
		cancel()
		if rerr := <-runErr; rerr != nil && err == nil {
			err = rerr
		}
	}()

	// wait waits for the event of commit, delivered or skipped.
	wait := func(commit string, want watcher.EventType) error {
		for {
			select {
			case e := <-events:
				if e.Commit.String() == commit {
					if e.Type != want {
						return fmt.Errorf("%.12s: got %s, want %s", commit, e.Type, want)
					}
					return nil
				}
			case <-ctx.Done():
				return fmt.Errorf("timed out waiting for %.12s", commit)
			}
		}
	}
	if err := wait(first, watcher.EventDelivered); err != nil {
		return err
	}

	docs := repo.Commit(env, "docs only", gittest.File("docs/README.md", "# demo\nmore docs\n"))
	w.Trigger(repo.URL()) // a push hint: poll now
	if err := wait(docs, watcher.EventUpToDate); err != nil {
		return err
	}

	greet := repo.Commit(env, "greet differently", gittest.File("deploy/configmap.yaml",
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: demo}\ndata: {greeting: bonjour}\n"))
	w.Trigger(repo.URL())
	if err := wait(greet, watcher.EventDelivered); err != nil {
		return err
	}
	published, err := os.ReadFile(filepath.Join(publish.Path(target), "configmap.yaml"))
	if err != nil {
		return err
	}
	fmt.Printf("published %s/configmap.yaml:\n%s", publish.Path(target), published)
	fmt.Println("demo done: 2 commits delivered, 1 commit outside the path skipped")
	return nil
}
