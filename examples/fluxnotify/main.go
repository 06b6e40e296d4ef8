// Command fluxnotify makes Flux sync a push at once, with zero
// configuration: it watches the cluster's Flux GitRepositories, polls their
// repositories (at once on a push hint), and tells Flux of each new commit
// through a Receiver it manages itself, or through the requestedAt
// annotation.
//
//	go run ./examples/fluxnotify -kubeconfig ~/.kube/config -listen :9000
//
// It runs on a controller-runtime Manager: metrics, health probes and, with
// -leader-elect, leader election (one replica polls; point the webhooks at
// examples/hub then, so that the leader hears them) come from it.
//
// With -listen it also serves push hints (GitHub, GitLab, Gitea, Bitbucket,
// generic HMAC), whose secrets come from the environment:
// MODWATCH_GITHUB_SECRET, MODWATCH_GITLAB_TOKEN, MODWATCH_GITEA_SECRET,
// MODWATCH_GOGS_SECRET, MODWATCH_BITBUCKET_SECRET, MODWATCH_GENERIC_SECRET
// (the same names as examples/hub).
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
	"github.com/modwatch/modwatch/sink/fluxreceiver"
	"github.com/modwatch/modwatch/source/flux"
	"github.com/modwatch/modwatch/source/webhook"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/cluster"
)

type options struct {
	kube        *rest.Config
	notify      fluxreceiver.Config
	cacheDir    string
	interval    time.Duration
	hints       net.Listener // push hints; may be nil
	metricsAddr string       // "" or "0": off
	probeAddr   string       // "" or "0": off
	leaderElect bool
	podNS       string // where the leader's Lease is
	log         logr.Logger
	observer    watcher.Observer // more observers (tests); may be nil
}

func main() {
	o := options{podNS: cmp.Or(os.Getenv("POD_NAMESPACE"), "flux-system")}
	receiverURL := flag.String("receiver-url", "http://webhook-receiver.flux-system.svc.cluster.local", "notification-controller's webhook receiver")
	mode := flag.String("mode", "receiver", "receiver (a managed Receiver) or annotate (the requestedAt annotation)")
	listen := flag.String("listen", "", "serve push hints here, e.g. :9000 (empty: off)")
	flag.StringVar(&o.cacheDir, "cache-dir", os.TempDir()+"/fluxnotify", "where repository mirrors are kept")
	flag.DurationVar(&o.interval, "interval", time.Minute, "poll interval")
	flag.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "serve /metrics here (0: off)")
	flag.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "serve /healthz and /readyz here (0: off)")
	flag.BoolVar(&o.leaderElect, "leader-elect", false, "run on the elected leader only")
	flag.Parse() // and -kubeconfig, which controller-runtime registers
	o.log = logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, nil))
	ctrl.SetLogger(o.log)
	o.notify = fluxreceiver.Config{ReceiverURL: *receiverURL, Mode: map[string]fluxreceiver.Mode{"receiver": fluxreceiver.ModeReceiver, "annotate": fluxreceiver.ModeAnnotate}[*mode]}
	kube, err := ctrl.GetConfig()
	if err == nil && o.notify.Mode == "" {
		err = fmt.Errorf("-mode %q is neither receiver nor annotate", *mode)
	}
	if err == nil && *listen != "" {
		o.hints, err = net.Listen("tcp", *listen)
	}
	if err == nil {
		o.kube = kube
		err = run(ctrl.SetupSignalHandler(), o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fluxnotify:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	mgr, err := ctrl.NewManager(o.kube, ctrl.Options{
		Logger: o.log, Metrics: server.Options{BindAddress: cmp.Or(o.metricsAddr, "0")}, HealthProbeBindAddress: cmp.Or(o.probeAddr, "0"),
		LeaderElection: o.leaderElect, LeaderElectionID: "modwatch-fluxnotify", LeaderElectionNamespace: o.podNS,
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
	notify, err := fluxreceiver.New(dyn, o.notify)
	if err != nil {
		return err
	}
	observers := []watcher.Observer{watcher.ObserverFunc(func(e watcher.Event) {
		switch e.Type {
		case watcher.EventDelivered:
			o.log.Info("Flux notified", "gitrepository", e.Target.ID, "commit", e.Commit.String())
		case watcher.EventDeliveryFailed, watcher.EventTargetFailed:
			o.log.Error(e.Err, "not notified", "gitrepository", e.Target.ID)
		}
	})}
	if o.observer != nil {
		observers = append(observers, o.observer)
	}
	// The watcher's metrics, probes and runs come with the Manager.
	w, err := cluster.NewWatcher(mgr, cluster.Options{LeaderElection: o.leaderElect}, watcher.WithCacheDir(o.cacheDir), watcher.WithInterval(o.interval), watcher.WithObserver(observers...))
	if err != nil {
		return err
	}
	if err := w.Route(flux.New(kc, dyn, flux.Config{}), notify); err != nil {
		return err
	}
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
		if err := mgr.Add(serve.Server{Handler: hooks, Listener: o.hints, Leader: o.leaderElect}); err != nil {
			return err
		}
	}
	return mgr.Start(logr.NewContext(ctx, o.log)) // the runnables log through their context
}
