// Command hub receives provider webhooks once and streams a push hint to
// every watcher subscribed to the pushed repository, so no agent needs a
// public webhook endpoint of its own.
//
// Provider secrets come from the environment (MODWATCH_GITHUB_SECRET,
// MODWATCH_GITLAB_TOKEN, MODWATCH_GITEA_SECRET, MODWATCH_GOGS_SECRET,
// MODWATCH_BITBUCKET_SECRET, MODWATCH_GENERIC_SECRET), subscriber tokens
// from a file, one per line. Point the providers at /hooks and the agents'
// webhook.NewSSE at /subscribe.
//
//	MODWATCH_GITHUB_SECRET=... go run ./examples/hub -tokens-file tokens.txt
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/modwatch/modwatch/internal/safefile"
	"github.com/modwatch/modwatch/source/webhook"
)

func main() {
	listen := flag.String("listen", ":8080", "address to serve /hooks, /subscribe, /metrics and /healthz on")
	tokensFile := flag.String("tokens-file", "", "file of subscriber bearer tokens, one per line")
	flag.Parse()
	if err := run(*listen, *tokensFile); err != nil {
		fmt.Fprintln(os.Stderr, "hub:", err)
		os.Exit(1)
	}
}

func run(listen, tokensFile string) error {
	log := logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, nil))
	// Through links (a mounted Secret's key), to a regular file of at most
	// 1 MiB: a named pipe is refused, not waited on.
	data, err := safefile.ReadFile(context.Background(), tokensFile, 1<<20, safefile.Follow)
	if err != nil {
		return fmt.Errorf("subscriber tokens: %w", err)
	}
	cfg := webhook.HubConfig{
		Webhook: webhook.Config{
			GitHubSecret: os.Getenv("MODWATCH_GITHUB_SECRET"), GitLabToken: os.Getenv("MODWATCH_GITLAB_TOKEN"),
			GiteaSecret: os.Getenv("MODWATCH_GITEA_SECRET"), GogsSecret: os.Getenv("MODWATCH_GOGS_SECRET"),
			BitbucketSecret: os.Getenv("MODWATCH_BITBUCKET_SECRET"), GenericSecret: os.Getenv("MODWATCH_GENERIC_SECRET"),
		},
		Tokens: strings.Fields(string(data)),
	}
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	hub, err := webhook.NewHub(cfg)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /hooks", hub.Webhooks())
	mux.Handle("POST /subscribe", hub)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	srv := &http.Server{Addr: listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		// The hub's handlers log to their request's context.
		BaseContext: func(net.Listener) context.Context { return logr.NewContext(context.Background(), log) }}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		hub.Close() // ends the subscriptions, which Shutdown would wait for
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info("serving", "addr", listen, "subscriberTokens", len(cfg.Tokens))
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
