package metrics_test

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/metrics"
)

// The watcher's outcomes and health as Prometheus metrics, on the
// registry the program serves. Before any event only the gauges of
// Watcher.Stats are there; the counters and histograms of outcomes appear
// with their first event.
func ExampleNew() {
	registry := prometheus.NewRegistry()

	m, _ := metrics.New(registry)
	w := watcher.New(watcher.WithObserver(m))
	m.CollectStats(w) // targets, remotes, retries, removals held, sources without a set, kept trees and their packs

	families, _ := registry.Gather()
	for _, f := range families {
		fmt.Println(f.GetName())
	}
	// Output:
	// modwatch_deliveries_retrying
	// modwatch_kept_pack_bytes
	// modwatch_kept_trees
	// modwatch_remotes
	// modwatch_removals_held
	// modwatch_sources_without_set
	// modwatch_targets
}
