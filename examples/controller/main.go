// Command controller is Numaplane's GitSync controller on the library: it
// applies each GitSync's repository path to the cluster, prunes what a
// commit removed, and writes the outcome into the GitSync's status. All
// the watching, fetching, rendering and applying lives in the library;
// this file is wiring, on a controller-runtime Manager (metrics, health
// probes and leader election come from it).
//
//	go run ./examples/controller -config /etc/numaplane/config.yaml -kubeconfig ~/.kube/config
//
// Replicas: with -leader-elect one replica polls everything and the others
// wait; with -shard every replica polls a share of the repositories
// (membership Leases in $POD_NAMESPACE, named after $POD_NAME) and the
// checkpoints live in ConfigMaps, so that they follow the repositories.
//
// The configuration is Numaplane's controller ConfigMap; it is reloaded
// when it changes (credentials, cluster name and interval at once; the
// cache directory, cascadeDeletion and autoHealDisabled at the next start).
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/modwatch/modwatch/sink/apply"
	"github.com/modwatch/modwatch/sink/apply/helm"
	"github.com/modwatch/modwatch/sink/apply/kustomize"
	"github.com/modwatch/modwatch/source/gitsync"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/cluster"
	"github.com/modwatch/modwatch/watcher/metrics"
)

// options is what main reads from its flags and environment.
type options struct {
	config      string // Numaplane's controller configuration file
	kube        *rest.Config
	namespace   string                // "" watches GitSyncs in every namespace
	cacheDir    string                // default when the configuration has no persistentRepoClonePath
	inventory   string                // the namespace of the apply inventories
	metricsAddr string                // "" or "0": off
	probeAddr   string                // "" or "0": off
	leaderElect bool                  // one replica polls everything
	shard       bool                  // every replica polls a share
	podName     string                // this replica, for -shard
	podNS       string                // where the Leases (and the -shard checkpoints) are
	registry    prometheus.Registerer // the metrics' (main: the Manager's; nil: a private one)
	log         logr.Logger
	observer    watcher.Observer // more observers (tests); may be nil
	refresh     time.Duration    // how often credentials are resolved again; 0: the default
}

func main() {
	o := options{podName: os.Getenv("POD_NAME"), podNS: cmp.Or(os.Getenv("POD_NAMESPACE"), "default"), registry: ctrlmetrics.Registry}
	flag.StringVar(&o.config, "config", "/etc/numaplane/config.yaml", "Numaplane's controller configuration, mounted from a ConfigMap")
	flag.StringVar(&o.namespace, "namespace", "", "namespace of the GitSyncs (empty: all)")
	flag.StringVar(&o.cacheDir, "cache-dir", "/var/cache/modwatch", "mirror cache when the configuration names none")
	flag.StringVar(&o.inventory, "inventory-namespace", "default", "namespace of the apply inventory ConfigMaps (the controller's own)")
	flag.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "serve /metrics here (0: off)")
	flag.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "serve /healthz and /readyz here (0: off)")
	flag.BoolVar(&o.leaderElect, "leader-elect", false, "run the watcher on the elected leader only")
	flag.BoolVar(&o.shard, "shard", false, "share the repositories among the replicas by Leases")
	flag.Parse() // and -kubeconfig, which controller-runtime registers
	o.log = logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, nil))
	ctrl.SetLogger(o.log)
	kube, err := ctrl.GetConfig()
	if err == nil {
		o.kube = kube
		err = run(ctrl.SetupSignalHandler(), o)
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
	mgr, err := ctrl.NewManager(o.kube, ctrl.Options{
		Logger: o.log, Metrics: server.Options{BindAddress: cmp.Or(o.metricsAddr, "0")}, HealthProbeBindAddress: cmp.Or(o.probeAddr, "0"),
		LeaderElection: o.leaderElect && !o.shard, LeaderElectionID: "modwatch-controller", LeaderElectionNamespace: o.podNS,
	})
	if err != nil {
		return err
	}
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
	if o.registry == nil {
		o.registry = prometheus.NewRegistry()
	}
	m, err := metrics.New(o.registry)
	if err != nil {
		return err
	}
	observers := []watcher.Observer{src.Observer(), m}
	if o.observer != nil {
		observers = append(observers, o.observer)
	}
	wopts := []watcher.Option{watcher.WithLogger(o.log), watcher.WithCacheDir(filepath.Join(cacheDir, "mirrors")),
		watcher.WithCredentials(creds), watcher.WithObserver(observers...)}
	if !cfg.AutoHealDisabled {
		wopts = append(wopts, watcher.WithResync(10*max(cfg.Interval(), time.Minute)))
	}
	more, err := storeAndShard(kc, o, cacheDir)
	if err != nil {
		return err
	}
	w := watcher.New(append(wopts, more...)...)
	if err := m.CollectStats(w); err != nil {
		return err
	}
	if err := w.Route(src, applier); err != nil {
		return err
	}
	if _, err := cluster.AddToManager(mgr, w, o.leaderElect && !o.shard); err != nil {
		return err
	}
	if err := mgr.Add(runnableFunc(func(ctx context.Context) error { return gitsync.FollowConfig(ctx, o.config, src, creds, o.log) })); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// storeAndShard keeps the checkpoints on disk for one replica, or in
// ConfigMaps with a Lease shard when the replicas share the repositories.
func storeAndShard(kc kubernetes.Interface, o options, cacheDir string) ([]watcher.Option, error) {
	if !o.shard {
		store, err := watcher.NewFileStore(filepath.Join(cacheDir, "checkpoints"))
		return []watcher.Option{watcher.WithStore(store)}, err
	}
	shard, err := cluster.NewLeaseShard(kc, cluster.LeaseShardConfig{
		Namespace: o.podNS, Group: "modwatch-controller", Identity: o.podName, ReleaseOnCancel: true, Log: o.log.WithName("shard"),
	})
	if err != nil {
		return nil, err
	}
	store, err := cluster.NewConfigMapStore(kc, o.podNS, "modwatch-controller-checkpoints")
	return []watcher.Option{watcher.WithShard(shard), watcher.WithStore(store)}, err
}

// runnableFunc runs on every replica, elected or not: the configuration
// feeds the source, which every replica has.
type runnableFunc func(context.Context) error

func (f runnableFunc) Start(ctx context.Context) error { return f(ctx) }
func (runnableFunc) NeedLeaderElection() bool          { return false }
