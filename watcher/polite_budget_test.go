package watcher_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// Two budgets for one host, however spelt, are refused, as every option
// set twice is.
func TestAHostBudgetSetTwiceIsRefused(t *testing.T) {
	for name, opts := range map[string][]watcher.Option{
		"same": {watcher.WithHostBudget("github.com", watcher.HostBudget{PerSecond: 1}), watcher.WithHostBudget("github.com", watcher.HostBudget{PerSecond: 100})},
		"case": {watcher.WithHostBudget("github.com", watcher.HostBudget{PerSecond: 1}), watcher.WithHostBudget("GitHub.com", watcher.HostBudget{PerSecond: 100})},
	} {
		w := newWatcher(t, watchertest.NewObserver(), opts...)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := w.Run(ctx)
		assert.ErrorIs(t, err, watcher.ErrInvalidOptions, "%s: Run returned %v", name, err)
	}
}
