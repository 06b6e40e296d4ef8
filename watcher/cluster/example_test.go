package cluster_test

import (
	"os"

	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/modwatch/modwatch/source/static"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/cluster"
)

// Every replica of a controller runs the watcher in its Manager; each
// polls a share of the repositories, and the checkpoints follow them.
func Example() {
	mgr, _ := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{HealthProbeBindAddress: ":8081"})
	kube := kubernetes.NewForConfigOrDie(mgr.GetConfig())
	ns, pod := os.Getenv("POD_NAMESPACE"), os.Getenv("POD_NAME")
	shard, _ := cluster.NewLeaseShard(kube, cluster.LeaseShardConfig{Namespace: ns, Identity: pod, ReleaseOnCancel: true})
	store, _ := cluster.NewConfigMapStore(kube, cluster.ConfigMapStoreConfig{Namespace: ns})
	// Metrics on the Manager's registry, its probes, and a run on every
	// replica (no LeaderElection).
	w, _ := cluster.NewWatcher(mgr, cluster.Options{}, watcher.WithShard(shard), watcher.WithStore(store))
	_ = w.Route(static.New(targets...), sink)
	_ = mgr.Start(ctrl.SetupSignalHandler())
}

var (
	targets []watcher.Target
	sink    watcher.Sink
)
