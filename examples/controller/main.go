// Command controller is Numaplane's GitSync controller on the library: it
// applies each GitSync's repository path to the cluster, prunes what a
// commit removed, and writes the outcome into the GitSync's status. All
// the watching, fetching, rendering and applying lives in the library;
// this file is wiring.
//
//	go run ./examples/controller -config /etc/numaplane/config.yaml -kubeconfig ~/.kube/config
//
// The configuration is Numaplane's controller ConfigMap; it is reloaded
// when it changes (credentials, cluster name and interval at once; the
// cache directory, cascadeDeletion and autoHealDisabled at the next start).
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/modwatch/modwatch/sink/apply"
	"github.com/modwatch/modwatch/sink/apply/helm"
	"github.com/modwatch/modwatch/sink/apply/kustomize"
	"github.com/modwatch/modwatch/source/gitsync"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/metrics"
)

// options is what main reads from its flags.
type options struct {
	config      string // Numaplane's controller configuration file
	kube        *rest.Config
	namespace   string // "" watches GitSyncs in every namespace
	cacheDir    string // default when the configuration has no persistentRepoClonePath
	inventory   string // the namespace of the apply inventories
	metricsAddr string
	log         logr.Logger
	observer    watcher.Observer // more observers (tests); may be nil
	refresh     time.Duration    // how often credentials are resolved again; 0: the default
}

func main() {
	var o options
	flag.StringVar(&o.config, "config", "/etc/numaplane/config.yaml", "Numaplane's controller configuration, mounted from a ConfigMap")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file (empty: in-cluster, or $KUBECONFIG)")
	flag.StringVar(&o.namespace, "namespace", "", "namespace of the GitSyncs (empty: all)")
	flag.StringVar(&o.cacheDir, "cache-dir", "/var/cache/modwatch", "mirror cache when the configuration names none")
	flag.StringVar(&o.inventory, "inventory-namespace", "default", "namespace of the apply inventory ConfigMaps (the controller's own)")
	flag.StringVar(&o.metricsAddr, "metrics-addr", ":8080", "serve /metrics and /healthz here (empty: off)")
	flag.Parse()

	o.log = logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *kubeconfig
	kube, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err == nil {
		o.kube = kube
		err = run(ctx, o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "controller:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	data, err := os.ReadFile(o.config)
	if err != nil {
		return err
	}
	cfg, ignored, err := gitsync.ParseControllerConfig(data)
	if err != nil {
		return err
	}
	if len(ignored) > 0 {
		o.log.Info("configuration keys not used by this controller", "keys", ignored)
	}
	cacheDir := cmp.Or(cfg.PersistentRepoClonePath, o.cacheDir)
	dyn, err := dynamic.NewForConfig(o.kube)
	if err != nil {
		return err
	}
	kc, err := kubernetes.NewForConfig(o.kube)
	if err != nil {
		return err
	}
	creds, err := gitsync.NewCredentials(kc, cfg)
	if err != nil {
		return err
	}
	srcOpts := []gitsync.Option{gitsync.WithLogger(o.log.WithName("gitsync")), gitsync.WithCredentials(creds)}
	if o.refresh > 0 {
		srcOpts = append(srcOpts, gitsync.WithRefreshInterval(o.refresh))
	}
	src := gitsync.New(dyn, gitsync.Config{Namespace: o.namespace, ClusterName: cfg.ClusterName, Interval: cfg.Interval()}, srcOpts...)
	applier, err := apply.New(o.kube, apply.Config{FieldManager: "numaplane-controller", CascadeDelete: cfg.CascadeDeletion, InventoryNamespace: o.inventory},
		apply.WithLogger(o.log.WithName("apply")),
		apply.WithRenderer(kustomize.Name, kustomize.New()),
		apply.WithRenderer(helm.Name, helm.New()))
	if err != nil {
		return err
	}
	store, err := watcher.NewFileStore(filepath.Join(cacheDir, "checkpoints"))
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		return err
	}
	observers := []watcher.Observer{src.Observer(), m}
	if o.observer != nil {
		observers = append(observers, o.observer)
	}
	wopts := []watcher.Option{watcher.WithLogger(o.log), watcher.WithCacheDir(filepath.Join(cacheDir, "mirrors")),
		watcher.WithStore(store), watcher.WithCredentials(creds), watcher.WithObserver(observers...)}
	if !cfg.AutoHealDisabled {
		wopts = append(wopts, watcher.WithResync(10*max(cfg.Interval(), time.Minute)))
	}
	w := watcher.New(wopts...)
	m.CollectStats(w)
	if err := w.Route(src, applier); err != nil {
		return err
	}

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return w.Run(ctx) })
	g.Go(func() error { return gitsync.FollowConfig(ctx, o.config, src, creds, o.log) })
	if o.metricsAddr != "" {
		srv := &http.Server{Addr: o.metricsAddr, Handler: mux(reg, w), ReadHeaderTimeout: 5 * time.Second}
		g.Go(func() error {
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return srv.Shutdown(sctx)
		})
		g.Go(func() error {
			if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
	}
	return g.Wait()
}

func mux(reg *prometheus.Registry, w *watcher.Watcher) http.Handler {
	m := http.NewServeMux()
	m.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	m.HandleFunc("/healthz", func(rw http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(rw, "%+v\n", w.Stats())
	})
	return m
}
