// Command hintlatency measures how long a commit takes to reach a sink:
// pushed and announced by a signed webhook (a push hint), against found by
// polling at the watcher's default interval. Both run against the real git
// server on loopback; the webhook is served over HTTP on loopback too.
//
//	go run ./internal/bench/hintlatency -pushes 100 -polled 10
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/modwatch/modwatch/internal/bench/quantile"
	"github.com/modwatch/modwatch/internal/gittest"
	"github.com/modwatch/modwatch/source/webhook"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

func main() {
	pushes := flag.Int("pushes", 100, "pushes announced by a webhook")
	polled := flag.Int("polled", 10, "pushes found by polling at the default interval")
	interval := flag.Duration("interval", time.Minute, "poll interval (the watcher's default)")
	flag.Parse()
	if err := run(*pushes, *polled, *interval); err != nil {
		fmt.Fprintln(os.Stderr, "hintlatency:", err)
		os.Exit(1)
	}
}

func run(pushes, polled int, interval time.Duration) (err error) {
	env := &gittest.Standalone{}
	defer env.Close()
	defer env.Recover(&err)
	srv := gittest.NewServer(env)
	repo := srv.NewRepo(env, "bench/app")
	repo.Commit(env, "init", gittest.File("deploy/app.yaml", "v0"))

	delivered := make(chan watcher.Change, 1)
	sink := watcher.SinkFunc(func(_ context.Context, c watcher.Change) error {
		delivered <- c
		return nil
	})
	w := watcher.New(watcher.WithCacheDir(env.TempDir()), watcher.WithInterval(interval))
	if err := w.Route(watchertest.NewSource(watcher.Target{ID: "app", URL: repo.URL(), Path: "deploy"}), sink); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if rerr := <-done; rerr != nil && err == nil {
			err = rerr
		}
	}()
	<-delivered

	const secret = "bench-secret"
	hooks, err := webhook.New(webhook.Config{GenericSecret: secret, MinInterval: time.Nanosecond}, w)
	if err != nil {
		return err
	}
	defer hooks.Close()
	hookSrv := httptest.NewServer(hooks)
	defer hookSrv.Close()
	body, _ := json.Marshal(map[string]string{"repository": repo.URL()})
	sig := webhook.Sign(secret, body)

	waitFor := func(commit string, limit time.Duration) error {
		timeout := time.NewTimer(limit)
		defer timeout.Stop()
		for {
			select {
			case c := <-delivered:
				if c.To == commit {
					return nil
				}
			case <-timeout.C:
				return fmt.Errorf("commit %.12s not delivered within %s", commit, limit)
			}
		}
	}

	var hinted []time.Duration
	for i := range pushes {
		commit := repo.Commit(env, "hinted", gittest.File("deploy/app.yaml", fmt.Sprint("hint ", i)))
		start := time.Now()
		req, _ := http.NewRequest(http.MethodPost, hookSrv.URL, bytes.NewReader(body))
		req.Header.Set("X-Signature", sig)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			return fmt.Errorf("webhook answered %s", resp.Status)
		}
		if err := waitFor(commit, time.Minute); err != nil {
			return err
		}
		hinted = append(hinted, time.Since(start))
	}

	var polls []time.Duration
	for i := range polled {
		// Push at a random point of the poll cycle.
		pause := time.NewTimer(time.Duration(rand.Int64N(int64(interval))))
		<-pause.C
		commit := repo.Commit(env, "polled", gittest.File("deploy/app.yaml", fmt.Sprint("poll ", i)))
		start := time.Now()
		if err := waitFor(commit, 3*interval); err != nil {
			return err
		}
		polls = append(polls, time.Since(start))
		fmt.Fprintf(os.Stderr, "polled push %d/%d: %s\n", i+1, polled, polls[i].Round(time.Millisecond))
	}

	hm, hp := quantile.Of(hinted, 0.5), quantile.Of(hinted, 0.99)
	fmt.Printf("\nPush → sink delivery on loopback (one repository, one target):\n\n")
	fmt.Println("| path | pushes | median | p99 (max when < 100 pushes) |")
	fmt.Println("|---|---:|---:|---:|")
	fmt.Printf("| webhook push hint | %d | %s | %s |\n", len(hinted), hm.Round(time.Millisecond), hp.Round(time.Millisecond))
	if len(polls) > 0 {
		pm, pp := quantile.Of(polls, 0.5), quantile.Of(polls, 0.99)
		fmt.Printf("| polling every %s (±10%% jitter) | %d | %s | %s |\n", interval, len(polls), pm.Round(time.Millisecond), pp.Round(time.Millisecond))
		fmt.Printf("\nmedian ratio, hint / polling: %.4f\n", float64(hm)/float64(pm))
	}
	return nil
}
