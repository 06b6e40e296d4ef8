// Command fluxsource serves Flux's GitRepositories in source-controller's
// place: it watches the cluster's GitRepositories, polls each repository
// once per interval for all of them (one persistent mirror a repository),
// packs the tree each one selects into the artifact source-controller would
// make, byte for byte, serves it, and writes the GitRepository's status, so
// that Flux's kustomize-controller and helm-controller apply from it.
//
//	go run ./examples/fluxsource -kubeconfig ~/.kube/config -storage-path /tmp/artifacts -storage-adv-addr localhost:9090
//
// Its flags are source-controller's where they mean the same:
// -storage-path, -storage-addr, -storage-adv-addr,
// -artifact-retention-ttl, -artifact-retention-records,
// -watch-all-namespaces (else the namespace of RUNTIME_NAMESPACE), -leader-elect,
// -metrics-addr, -health-addr. `flux reconcile source git` works as with
// source-controller (the request polls at once and is acknowledged), and
// a GitRepository source-controller served before is deleted as it would
// be (its finalizer goes with the artifacts). spec.timeout bounds the git
// requests of its repository's polls; spec.include puts the included
// artifacts in, and a new artifact included makes a new one of the
// GitRepository including it. A GitRepository with a spec.ref.semver
// that is not a range, or an include of itself, is not served, and says
// so in its status (Stalled, with the reason) and the log (source/flux's
// Config.Artifacts). Two programs cannot share one -storage-path: the
// second exits.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/modwatch/modwatch/examples/internal/serve"
	"github.com/modwatch/modwatch/sink/fluxartifact"
	"github.com/modwatch/modwatch/source/flux"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/cluster"
)

type options struct {
	kube        *rest.Config
	artifacts   fluxartifact.Config
	storage     net.Listener
	namespace   string // "" for all
	cacheDir    string
	metricsAddr string // "" or "0": off
	probeAddr   string // "" or "0": off
	leaderElect bool
	podNS       string
	log         logr.Logger
	observer    watcher.Observer // more observers (tests); may be nil
}

func main() {
	o := options{podNS: cmp.Or(os.Getenv("RUNTIME_NAMESPACE"), "flux-system")}
	storageAddr := flag.String("storage-addr", ":9090", "serve the artifacts here")
	all := flag.Bool("watch-all-namespaces", true, "watch every namespace, else RUNTIME_NAMESPACE's only")
	flag.StringVar(&o.artifacts.Storage, "storage-path", "/data", "where the artifacts are kept")
	flag.StringVar(&o.artifacts.Address, "storage-adv-addr", "", "the host[:port] the artifacts' URLs name (default: source-controller.<RUNTIME_NAMESPACE>.svc.cluster.local.)")
	flag.DurationVar(&o.artifacts.TTL, "artifact-retention-ttl", time.Minute, "how long an artifact that is not the current one may be kept")
	flag.IntVar(&o.artifacts.Records, "artifact-retention-records", 2, "how many artifacts of a GitRepository are kept")
	flag.StringVar(&o.cacheDir, "cache-dir", os.TempDir()+"/fluxsource", "where repository mirrors are kept")
	flag.StringVar(&o.metricsAddr, "metrics-addr", ":8080", "serve /metrics here (0: off)")
	flag.StringVar(&o.probeAddr, "health-addr", ":9440", "serve /healthz and /readyz here (0: off)")
	flag.BoolVar(&o.leaderElect, "leader-elect", false, "run on the elected leader only")
	flag.Parse() // and -kubeconfig, which controller-runtime registers
	o.log = logr.FromSlogHandler(slog.NewJSONHandler(os.Stderr, nil))
	ctrl.SetLogger(o.log)
	o.artifacts.Address = cmp.Or(o.artifacts.Address, "source-controller."+o.podNS+".svc.cluster.local.")
	if !*all {
		o.namespace = o.podNS
	}
	kube, err := ctrl.GetConfig()
	if err == nil && (o.artifacts.Records < 1 || o.artifacts.TTL <= 0) {
		err = fmt.Errorf("-artifact-retention-records %d and -artifact-retention-ttl %s: at least 1 and more than 0 are served", o.artifacts.Records, o.artifacts.TTL)
	}
	if err == nil {
		o.storage, err = net.Listen("tcp", *storageAddr)
	}
	if err == nil {
		o.kube = kube
		err = run(ctrl.SetupSignalHandler(), o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fluxsource:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	mgr, err := ctrl.NewManager(o.kube, ctrl.Options{
		Logger: o.log, Metrics: server.Options{BindAddress: cmp.Or(o.metricsAddr, "0")}, HealthProbeBindAddress: cmp.Or(o.probeAddr, "0"),
		LeaderElection: o.leaderElect, LeaderElectionID: "modwatch-fluxsource", LeaderElectionNamespace: o.podNS,
	})
	if err != nil {
		return err
	}
	kc, err := kubernetes.NewForConfig(o.kube)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(o.kube)
	if err != nil {
		return err
	}
	sink, err := fluxartifact.New(dyn, o.artifacts)
	if err != nil {
		return err
	}
	defer sink.Close()
	// The sink observes too: a GitRepository that cannot be fetched gets
	// Flux's failure conditions.
	observers := []watcher.Observer{sink, watcher.ObserverFunc(func(e watcher.Event) {
		switch e.Type {
		case watcher.EventDelivered:
			o.log.Info("artifact stored", "gitrepository", e.Target.ID, "commit", e.Commit.String())
		case watcher.EventDeliveryFailed, watcher.EventTargetFailed:
			o.log.Error(e.Err, "no artifact", "gitrepository", e.Target.ID)
		}
	})}
	if o.observer != nil {
		observers = append(observers, o.observer)
	}
	w, err := cluster.NewWatcher(mgr, cluster.Options{LeaderElection: o.leaderElect}, watcher.WithCacheDir(o.cacheDir), watcher.WithObserver(observers...))
	if err != nil {
		return err
	}
	if err := w.Route(flux.New(kc, dyn, flux.Config{Namespace: o.namespace, Artifacts: true}), sink); err != nil {
		return err
	}
	if err := mgr.Add(serve.Server{Handler: sink.Handler(), Listener: o.storage, Leader: o.leaderElect}); err != nil {
		return err
	}
	return mgr.Start(logr.NewContext(ctx, o.log))
}
