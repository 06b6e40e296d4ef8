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
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

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
	cacheDir := flag.String("cache-dir", "/var/cache/modwatch", "where repository mirrors and checkpoints are kept")
	inventory := flag.String("inventory-namespace", "default", "namespace of the inventory ConfigMaps")
	flag.Parse() // and -kubeconfig, which controller-runtime registers (empty: $KUBECONFIG, or in-cluster)
	level := new(slog.LevelVar)
	log := logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	err := run(ctrl.SetupSignalHandler(), options{config: *config, kube: ctrl.GetConfigOrDie(), cacheDir: *cacheDir, inventory: *inventory, log: log, level: level})
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
	src := configmap.New(configmap.Options{Path: o.config,
		LoadOptions: configmap.LoadOptions{OwnKeys: []string{"logLevel"}, // the agent's log verbosity, the program's to act on
			Credentials: func(rcs []spec.RepoCredential) error {
				return creds.Set(&gitsync.ControllerConfig{RepoCredentials: rcs})
			},
			Values: configmap.GitValues(o.cacheDir+"/values", creds, time.Minute)},
		OnReload: func(r configmap.Reload) {
			if r.Err == nil {
				o.log.Info("configuration reloaded", "targets", len(r.Targets))
			}
			if n, err := loglevel.Parse(r.Data); err != nil {
				o.log.Error(err, "logLevel not applied")
			} else {
				loglevel.Set(o.level, n)
			}
		}})
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
