// Command controller is Numaplane's GitSync controller on the library: it
// applies each GitSync's repository path to the cluster as Numaplane does
// (into its destination namespace, its objects labelled with the GitSync's
// name, a chart's CRDs skipped, only the kinds of includedResources
// managed), prunes what a commit removed, and writes the outcome into the
// GitSync's status beside whatever else writes there. All the watching,
// fetching, rendering and applying lives in the library; this file is
// wiring, on a controller-runtime Manager (metrics, health probes and
// leader election come from it).
//
//	go run ./examples/controller -config /etc/numaplane/config.yaml -kubeconfig ~/.kube/config
//
// Replicas: with -leader-elect one replica polls everything and the others
// wait; with -shard every replica polls a share of the repositories
// (membership Leases in $POD_NAMESPACE, named after $POD_NAME) and the
// checkpoints live in ConfigMaps, so that they follow the repositories.
//
// The configuration is Numaplane's controller ConfigMap, followed as it
// changes: credentials, cluster name, interval, automatedSyncDisabled and
// logLevel at once; cascadeDeletion at each removal; autoHealDisabled and
// includedResources at each resync and delivery; persistentRepoClonePath
// at the next start.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/go-logr/logr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/modwatch/modwatch/examples/internal/loglevel"
	"github.com/modwatch/modwatch/sink/apply"
	"github.com/modwatch/modwatch/sink/apply/helm"
	"github.com/modwatch/modwatch/sink/apply/kustomize"
	"github.com/modwatch/modwatch/source/gitsync"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/cluster"
)

// options is what main reads from its flags and environment (the Manager's
// options carry the logger); tests fill it.
type options struct {
	config, namespace, cacheDir, inventory string   // configuration file, GitSyncs' namespace ("": all), cache, inventories' namespace
	name                                   string   // this install among others (apply.Config.Instance); "" from namespace
	shard                                  bool     // every replica polls a share
	takeOver                               []string // field managers whose GitSync status fields are this controller's
	pod                                    cluster.LeaseShardConfig
	mgr                                    ctrl.Options
	logLevel                               *slog.LevelVar         // set from the configuration's logLevel (nil: none)
	observers                              []watcher.Observer     // more (tests)
	made                                   func(*watcher.Watcher) // told of the watcher (tests)
}

func main() {
	level := new(slog.LevelVar)
	log := logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ns := cmp.Or(os.Getenv("POD_NAMESPACE"), "default") // the Leases' and checkpoints' (-shard)
	o := options{logLevel: level, mgr: ctrl.Options{Logger: log, LeaderElectionID: "modwatch-controller", LeaderElectionNamespace: ns},
		pod: cluster.LeaseShardConfig{Namespace: ns, Identity: os.Getenv("POD_NAME"), Group: "modwatch-controller", ReleaseOnCancel: true, Log: log.WithName("shard")}}
	flag.StringVar(&o.config, "config", "/etc/numaplane/config.yaml", "Numaplane's controller configuration, mounted from a ConfigMap")
	flag.StringVar(&o.namespace, "namespace", "", "namespace of the GitSyncs (empty: all)")
	flag.StringVar(&o.cacheDir, "cache-dir", "/var/cache/modwatch", "mirror cache when the configuration names none")
	flag.StringVar(&o.inventory, "inventory-namespace", "default", "namespace of the apply inventory ConfigMaps (the controller's own)")
	flag.StringVar(&o.name, "name", "", "this install's name among others that share the inventory namespace: it lists, sweeps and prunes only its own (default: the -namespace it watches; none when it watches all)")
	flag.StringVar(&o.mgr.Metrics.BindAddress, "metrics-bind-address", ":8080", "serve /metrics here (0: off)")
	flag.StringVar(&o.mgr.HealthProbeBindAddress, "health-probe-bind-address", ":8081", "serve /healthz and /readyz here (0: off)")
	flag.BoolVar(&o.mgr.LeaderElection, "leader-elect", false, "run the watcher on the elected leader only (not with -shard)")
	flag.BoolVar(&o.shard, "shard", false, "share the repositories among the replicas by Leases")
	flag.Func("take-over-status", "a field manager whose GitSync status fields this controller takes over: the one a controller it replaces wrote them as, when nothing writes as it any more (repeatable)",
		func(m string) error { o.takeOver = append(o.takeOver, m); return nil })
	flag.Parse() // and -kubeconfig, which controller-runtime registers
	ctrl.SetLogger(log)
	if err := run(ctrl.SetupSignalHandler(), ctrl.GetConfigOrDie(), o); err != nil {
		fmt.Fprintln(os.Stderr, "controller:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, kube *rest.Config, o options) error {
	mgr, err := ctrl.NewManager(kube, o.mgr)
	if err != nil {
		return err
	}
	kc, dyn := kubernetes.NewForConfigOrDie(kube), dynamic.NewForConfigOrDie(kube)
	c, err := gitsync.NewController(kc, dyn, gitsync.ControllerOptions{Path: o.config, Source: gitsync.Config{Namespace: o.namespace, Accept: gitsync.ValidDestination, TakeOver: o.takeOver},
		OnReload: func(cfg *gitsync.ControllerConfig, _ []byte) { loglevel.Set(o.logLevel, cfg.LogLevel) }})
	if err != nil {
		return err
	}
	// This install's inventories are its own: another never lists or sweeps them.
	instance := cmp.Or(o.name, c.Instance())
	o.mgr.Logger.Info("install", "instance", instance, "namespace", o.namespace, "inventoryNamespace", o.inventory)
	applier, err := apply.New(kube, apply.Config{FieldManager: "numaplane-controller", Instance: instance, InventoryNamespace: o.inventory,
		ForceNamespace: true, TrackingLabel: gitsync.TrackingLabel, TrackingValue: gitsync.TrackingValue, AdoptByValue: true,
		CascadeDeleteFunc: c.CascadeDeletion, Include: c.Included, IncludeMode: apply.IncludeSkip,
		Renderers: map[string]apply.Renderer{kustomize.Name: kustomize.New(), helm.Name: helm.New(helm.WithCRDs(helm.CRDsSkip))}})
	if err != nil {
		return err
	}
	var shard watcher.Shard // none: this replica polls every repository
	var store watcher.Store // none: checkpoints on disk beside the mirrors
	if o.shard {            // Leases share the repositories; checkpoints in ConfigMaps follow them
		if shard, store, err = cluster.Sharded(kc, o.pod, "modwatch-controller-checkpoints"); err != nil {
			return err
		}
	}
	opts, err := c.WatcherOptions(o.cacheDir, store) // mirrors, checkpoints, credentials, status, resync
	if err != nil {
		return err
	}
	// The watcher's metrics, probes and runs come with the Manager.
	w, err := cluster.NewWatcher(mgr, cluster.Options{LeaderElection: o.mgr.LeaderElection}, append(opts, watcher.WithShard(shard), watcher.WithObserver(o.observers...))...)
	if err == nil {
		err = errors.Join(w.Route(c.Source, applier), mgr.Add(c))
	}
	if err != nil {
		return err
	}
	if o.made != nil {
		o.made(w)
	}
	return mgr.Start(logr.NewContext(ctx, o.mgr.Logger)) // the runnables log through ctx
}
