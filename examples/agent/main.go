// Command agent applies the control repository named in a mounted
// ConfigMap (Numaplane's agent configuration) to the cluster it runs in,
// and follows the ConfigMap as it changes.
//
//	go run ./examples/agent -config /etc/agent/config.yaml -kubeconfig ~/.kube/config
//
// It logs a line per configuration reload and per delivery.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/modwatch/modwatch/examples/internal/loglevel"
	"github.com/modwatch/modwatch/sink/apply"
	"github.com/modwatch/modwatch/sink/apply/helm"
	"github.com/modwatch/modwatch/sink/apply/kustomize"
	"github.com/modwatch/modwatch/source/configmap"
	"github.com/modwatch/modwatch/source/gitsync"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/spec"
)

// options is what main reads from its flags.
type options struct {
	config    string // the mounted configuration file
	kube      *rest.Config
	cacheDir  string // the repositories' mirrors and the checkpoints
	inventory string // the namespace of the apply inventories
	log       logr.Logger
	level     *slog.LevelVar   // set from the configuration's logLevel (nil: none)
	observer  watcher.Observer // more observers (tests); may be nil
}

func main() {
	config := flag.String("config", "/etc/modwatch/config.yaml", "the agent configuration, mounted from a ConfigMap")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file (empty: in-cluster, or $KUBECONFIG)")
	cacheDir := flag.String("cache-dir", "/var/cache/modwatch", "where repository mirrors and checkpoints are kept")
	inventory := flag.String("inventory-namespace", "default", "namespace of the inventory ConfigMaps")
	flag.Parse()

	level := new(slog.LevelVar)
	log := logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *kubeconfig
	kube, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err == nil {
		err = run(ctx, options{config: *config, kube: kube, cacheDir: *cacheDir, inventory: *inventory, log: log, level: level})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(1)
	}
}

// run is the whole agent: the ConfigMap source, the apply sink, a watcher.
func run(ctx context.Context, o options) error {
	applier, err := apply.New(o.kube, apply.Config{FieldManager: "modwatch-agent", InventoryNamespace: o.inventory,
		Renderers: map[string]apply.Renderer{kustomize.Name: kustomize.New(), helm.Name: helm.New()}})
	if err != nil {
		return err
	}
	store, err := watcher.NewFileStore(o.cacheDir + "/checkpoints")
	if err != nil {
		return err
	}
	// The credentials the configuration names (gitDefinition.repoCredential,
	// the reference files'), read from Secrets or files at each resolution.
	kube, err := kubernetes.NewForConfig(o.kube)
	if err != nil {
		return err
	}
	creds, err := gitsync.NewCredentials(kube, &gitsync.ControllerConfig{})
	if err != nil {
		return err
	}
	src := configmap.New(o.config,
		configmap.WithOwnKeys("logLevel"), // Numaplane's: the agent's log verbosity, not the library's
		configmap.WithCredentials(func(rcs []spec.RepoCredential) error {
			return creds.Set(&gitsync.ControllerConfig{RepoCredentials: rcs})
		}),
		configmap.WithValues(configmap.GitValues(o.cacheDir+"/values", creds, time.Minute)),
		configmap.WithOnReload(func(r configmap.Reload) {
			if r.Err == nil {
				o.log.Info("configuration reloaded", "targets", len(r.Targets))
			}
			if r.Data != nil {
				if err := loglevel.Set(o.level, r.Data); err != nil {
					o.log.Error(err, "logLevel not applied")
				}
			}
		}))
	observers := []watcher.Observer{watcher.ObserverFunc(func(e watcher.Event) {
		switch e.Type {
		case watcher.EventDelivered:
			o.log.Info("applied", "target", e.Target.ID, "commit", e.Commit, "result", fmt.Sprint(e.Result))
		case watcher.EventDeliveryFailed, watcher.EventTargetFailed:
			o.log.Error(e.Err, "not applied", "target", e.Target.ID, "commit", e.Commit)
		}
	})}
	if o.observer != nil {
		observers = append(observers, o.observer)
	}
	w := watcher.New(watcher.WithCacheDir(o.cacheDir+"/mirrors"),
		watcher.WithStore(store), watcher.WithObserver(observers...), watcher.WithCredentials(creds))
	if err := w.Route(src, applier); err != nil {
		return err
	}
	return w.Run(logr.NewContext(ctx, o.log)) // the watcher, its source and sink log through ctx
}
