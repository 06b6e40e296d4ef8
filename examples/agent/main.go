// Command agent applies the control repository named in a mounted
// ConfigMap (Numaplane's agent configuration) to the cluster it runs in,
// and follows the ConfigMap as it changes.
//
//	go run ./examples/agent -config /etc/agent/config.yaml -kubeconfig ~/.kube/config
//
// It logs each reading of the configuration and each failure, and each
// delivery with logLevel: 1 in the configuration.
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
// The library logs each reading of the configuration, each failure, and
// each delivery at V(1) (logLevel: 1).
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
	creds, err := gitsync.NewCredentials(kubernetes.NewForConfigOrDie(o.kube), nil)
	if err != nil {
		return err
	}
	src := configmap.New(configmap.Options{Path: o.config,
		LoadOptions: configmap.LoadOptions{OwnKeys: []string{"logLevel"}, // the agent's log verbosity, the program's to act on
			Credentials: creds.SetRepoCredentials, Values: configmap.GitValues(o.cacheDir+"/values", creds, time.Minute)},
		OnReload: func(r configmap.Reload) {
			if n, err := loglevel.Parse(r.Data); err != nil {
				o.log.Error(err, "logLevel not applied")
			} else {
				loglevel.Set(o.level, n)
			}
		}})
	w := watcher.New(watcher.WithCacheDir(o.cacheDir+"/mirrors"),
		watcher.WithStore(store), watcher.WithObserver(o.observer), watcher.WithCredentials(creds))
	if err := w.Route(src, applier); err != nil {
		return err
	}
	return w.Run(logr.NewContext(ctx, o.log)) // the watcher, its source and sink log through ctx
}
