// Command hublatency measures the push hub: the time from a signed webhook
// arriving to each subscriber receiving its hint, with many subscribers of
// one repository connected over loopback.
//
//	go run ./internal/dev/bench/hublatency -subscribers 1000 -pushes 50
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modwatch/modwatch/internal/dev/bench/quantile"
	"github.com/modwatch/modwatch/source/webhook"
)

func main() {
	subscribers := flag.Int("subscribers", 1000, "subscriptions to the repository")
	pushes := flag.Int("pushes", 50, "webhooks, one after the other")
	debounce := flag.Duration("debounce", -1, "hub debounce (-1: none; the default is 250ms)")
	flag.Parse()
	if err := run(*subscribers, *pushes, *debounce); err != nil {
		fmt.Fprintln(os.Stderr, "hublatency:", err)
		os.Exit(1)
	}
}

func run(subscribers, pushes int, debounce time.Duration) error {
	const secret, token, repo = "bench-secret", "bench-token", "https://git.example.com/platform/app.git"
	hub, err := webhook.NewHub(webhook.HubConfig{
		Webhook: webhook.Config{GenericSecret: secret}, Tokens: []string{token},
		MaxSubscribers: subscribers, Debounce: debounce,
	})
	if err != nil {
		return err
	}
	srv := httptest.NewServer(hub)
	defer srv.Close()
	defer hub.Close()
	hooks := httptest.NewServer(hub.Webhooks())
	defer hooks.Close()

	var start atomic.Int64 // when the current push was sent, in ns
	arrived := make(chan time.Duration, subscribers)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = subscribers
	client := &http.Client{Transport: tr}
	stream, err := webhook.NewSSE(webhook.SSEConfig{URL: srv.URL, Token: token, HTTPClient: client})
	if err != nil {
		return err
	}
	for range subscribers {
		wg.Go(func() {
			_ = stream.Subscribe(ctx, []string{repo}, func(string) {
				arrived <- time.Duration(time.Now().UnixNano() - start.Load())
			})
		})
	}
	for {
		n, changed := hub.Subscribers()
		if n == subscribers {
			break
		}
		select {
		case <-changed:
		case <-time.After(time.Minute):
			return fmt.Errorf("only %d of %d subscribed", n, subscribers)
		}
	}

	body := []byte(`{"repository": "` + repo + `"}`)
	sig := webhook.Sign(secret, body)
	var lat []time.Duration
	for range pushes {
		req, _ := http.NewRequest(http.MethodPost, hooks.URL, bytes.NewReader(body))
		req.Header.Set("X-Signature", sig)
		start.Store(time.Now().UnixNano())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			return fmt.Errorf("webhook answered %s", resp.Status)
		}
		for range subscribers {
			select {
			case d := <-arrived:
				lat = append(lat, d)
			case <-time.After(time.Minute):
				return fmt.Errorf("a hint did not arrive")
			}
		}
	}
	fmt.Printf("| subscribers | pushes | hub debounce | median | p99 | max |\n|---:|---:|---:|---:|---:|---:|\n")
	fmt.Printf("| %d | %d | %s | %s | %s | %s |\n", subscribers, pushes, max(debounce, 0),
		quantile.Of(lat, 0.5).Round(time.Microsecond), quantile.Of(lat, 0.99).Round(time.Microsecond), quantile.Of(lat, 1).Round(time.Microsecond))
	return nil
}
