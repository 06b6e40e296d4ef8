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
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/modwatch/modwatch/examples/internal/loglevel"
	"github.com/modwatch/modwatch/internal/filewatch"
	"github.com/modwatch/modwatch/internal/safefile"
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
	config, namespace, cacheDir, inventory string // configuration file, GitSyncs' namespace ("": all), cache, inventories' namespace
	name                                   string // this install among others (apply.Config.Instance); "" from namespace
	shard                                  bool   // every replica polls a share
	pod                                    cluster.LeaseShardConfig
	mgr                                    ctrl.Options
	observers                              []watcher.Observer     // more (tests)
	made                                   func(*watcher.Watcher) // told of the watcher (tests)
	logLevel                               *slog.LevelVar         // set from the configuration's logLevel (nil: none)
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
	flag.Parse() // and -kubeconfig, which controller-runtime registers
	ctrl.SetLogger(log)
	if err := run(ctrl.SetupSignalHandler(), ctrl.GetConfigOrDie(), o); err != nil {
		fmt.Fprintln(os.Stderr, "controller:", err)
		os.Exit(1)
	}
}

// validDestination refuses a GitSync whose destination namespace is not a
// namespace name, as Numaplane's reconciler does: nothing of it is applied
// (into "default" or anywhere).
func validDestination(gs *unstructured.Unstructured) error {
	ns, _, _ := unstructured.NestedString(gs.Object, "spec", "destination", "namespace")
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return fmt.Errorf("spec.destination.namespace %q is not a namespace name: %s", ns, strings.Join(errs, "; "))
	}
	return nil
}

// instanceOf names this install among others: -name, else the namespace
// it watches; none when it watches all (the inventories of an install
// from before instances existed).
func instanceOf(o options) string {
	if o.name != "" {
		return o.name
	}
	if o.namespace != "" {
		return "namespace/" + o.namespace
	}
	return ""
}

func run(ctx context.Context, kube *rest.Config, o options) error {
	mgr, err := ctrl.NewManager(kube, o.mgr)
	if err != nil {
		return err
	}
	kc, dyn := kubernetes.NewForConfigOrDie(kube), dynamic.NewForConfigOrDie(kube)
	// Numaplane's configuration, of which the program reads logLevel
	// itself, the rest the library: no key passed over.
	data, err := safefile.ReadFile(ctx, o.config, filewatch.MaxSize, safefile.Follow) // as gitsync.LoadController
	if err != nil {
		return err
	}
	cfg, err := gitsync.ParseControllerConfig(data, "logLevel")
	if err != nil {
		return fmt.Errorf("%s: %w", o.config, err)
	}
	if err := loglevel.Set(o.logLevel, data); err != nil {
		return err
	}
	c, err := gitsync.NewController(gitsync.ControllerFile{Path: o.config, Config: cfg, OwnKeys: []string{"logLevel"},
		OnReload: func(data []byte) { _ = loglevel.Set(o.logLevel, data) }}, kc, dyn,
		gitsync.Config{Namespace: o.namespace, Accept: validDestination})
	if err != nil {
		return err
	}
	// As Numaplane applies: into the destination namespace, with its
	// tracking label, cascadeDeletion read at each removal. Its inventories
	// are its install's own: another install never lists or sweeps them.
	instance := instanceOf(o)
	o.mgr.Logger.Info("install", "instance", instance, "namespace", o.namespace, "inventoryNamespace", o.inventory)
	applier, err := apply.New(kube, apply.Config{FieldManager: "numaplane-controller", Instance: instance, CascadeDeleteFunc: c.CascadeDeletion, InventoryNamespace: o.inventory,
		ForceNamespace: true, TrackingLabel: "numaplane.numaproj.io/tracking-id", Include: c.Included,
		Renderers: map[string]apply.Renderer{kustomize.Name: kustomize.New(), helm.Name: helm.New()}})
	if err != nil {
		return err
	}
	opts, err := c.WatcherOptions(o.cacheDir) // mirrors and checkpoints on disk, credentials, status, resync
	if o.shard && err == nil {                // Leases share the repositories; checkpoints in ConfigMaps follow them
		sharded, serr := cluster.Sharded(kc, o.pod, "modwatch-controller-checkpoints")
		opts, err = append(opts, sharded...), serr
	}
	if err != nil {
		return err
	}
	// The watcher's metrics, probes and runs come with the Manager.
	w, err := cluster.NewWatcher(mgr, o.mgr.LeaderElection, append(opts, watcher.WithObserver(o.observers...))...)
	if err == nil {
		err = errors.Join(w.Route(c.Source, applier), mgr.Add(c))
	}
	if err == nil && o.made != nil {
		o.made(w)
	}
	if err != nil {
		return err
	}
	// The Manager's runnables (the watcher, the configuration follower)
	// log through their context's logger.
	return mgr.Start(logr.NewContext(ctx, o.mgr.Logger))
}
