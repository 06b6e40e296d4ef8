// Command fluxnotify makes Flux sync a push at once, with zero
// configuration: it watches the cluster's Flux GitRepositories, polls their
// repositories (at once on a push hint), and tells Flux of each new commit
// through a Receiver it manages itself, or through the requestedAt
// annotation.
//
//	go run ./examples/fluxnotify -kubeconfig ~/.kube/config -listen :9000
//
// With -listen it also serves push hints (GitHub, GitLab, Gitea, Bitbucket,
// generic HMAC), whose secrets come from the environment:
// MODWATCH_GITHUB_SECRET, MODWATCH_GITLAB_TOKEN, MODWATCH_GITEA_SECRET,
// MODWATCH_GOGS_SECRET, MODWATCH_BITBUCKET_SECRET, MODWATCH_GENERIC_SECRET
// (the same names as examples/hub).
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
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/modwatch/modwatch/sink/fluxreceiver"
	"github.com/modwatch/modwatch/source/flux"
	"github.com/modwatch/modwatch/source/webhook"
	"github.com/modwatch/modwatch/watcher"
)

type options struct {
	kube     *rest.Config
	notify   fluxreceiver.Config
	cacheDir string
	interval time.Duration
	hints    net.Listener // push hints; may be nil
	log      logr.Logger
	observer watcher.Observer // more observers (tests); may be nil
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file (empty: in-cluster, or $KUBECONFIG)")
	receiverURL := flag.String("receiver-url", "http://webhook-receiver.flux-system.svc.cluster.local", "notification-controller's webhook receiver")
	mode := flag.String("mode", "receiver", "receiver (a managed Receiver) or annotate (the requestedAt annotation)")
	listen := flag.String("listen", "", "serve push hints here, e.g. :9000 (empty: off)")
	cacheDir := flag.String("cache-dir", os.TempDir()+"/fluxnotify", "where repository mirrors are kept")
	interval := flag.Duration("interval", time.Minute, "poll interval")
	flag.Parse()

	log := logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	o := options{cacheDir: *cacheDir, interval: *interval, log: log,
		notify: fluxreceiver.Config{ReceiverURL: *receiverURL, Mode: map[string]fluxreceiver.Mode{"receiver": fluxreceiver.ModeReceiver, "annotate": fluxreceiver.ModeAnnotate}[*mode]}}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *kubeconfig
	kube, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err == nil && o.notify.Mode == "" {
		err = fmt.Errorf("-mode %q is neither receiver nor annotate", *mode)
	}
	if err == nil && *listen != "" {
		o.hints, err = net.Listen("tcp", *listen)
	}
	if err == nil {
		o.kube = kube
		err = run(ctx, o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fluxnotify:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	kc, err := kubernetes.NewForConfig(o.kube)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(o.kube)
	if err != nil {
		return err
	}
	notify, err := fluxreceiver.New(dyn, o.notify, fluxreceiver.WithLogger(o.log.WithName("notify")))
	if err != nil {
		return err
	}
	observers := []watcher.Observer{watcher.ObserverFunc(func(e watcher.Event) {
		switch e.Type {
		case watcher.EventDelivered:
			o.log.Info("Flux notified", "gitrepository", e.Target.ID, "commit", e.Commit)
		case watcher.EventDeliveryFailed, watcher.EventTargetFailed:
			o.log.Error(e.Err, "not notified", "gitrepository", e.Target.ID)
		}
	})}
	if o.observer != nil {
		observers = append(observers, o.observer)
	}
	w := watcher.New(watcher.WithLogger(o.log), watcher.WithCacheDir(o.cacheDir), watcher.WithInterval(o.interval), watcher.WithObserver(observers...))
	if err := w.Route(flux.New(kc, dyn, flux.Config{}, flux.WithLogger(o.log.WithName("flux"))), notify); err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return w.Run(ctx) })
	if o.hints != nil {
		hooks, err := webhook.New(webhook.Config{
			GitHubSecret: os.Getenv("MODWATCH_GITHUB_SECRET"), GitLabToken: os.Getenv("MODWATCH_GITLAB_TOKEN"),
			GiteaSecret: os.Getenv("MODWATCH_GITEA_SECRET"), GogsSecret: os.Getenv("MODWATCH_GOGS_SECRET"),
			BitbucketSecret: os.Getenv("MODWATCH_BITBUCKET_SECRET"),
			GenericSecret:   os.Getenv("MODWATCH_GENERIC_SECRET"),
		}, w)
		if err != nil {
			return err
		}
		defer hooks.Close()
		srv := &http.Server{Handler: hooks, ReadHeaderTimeout: 5 * time.Second}
		g.Go(func() error {
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return srv.Shutdown(sctx)
		})
		g.Go(func() error {
			if err := srv.Serve(o.hints); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
	}
	return g.Wait()
}
