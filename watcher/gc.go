package watcher

import (
	"context"
	"os"
	"path/filepath"
	"time"
)

// gcLoop removes, every so often, the mirrors no remote uses that were last
// used longer ago than the mirror grace.
func (w *Watcher) gcLoop(ctx context.Context) error {
	every := min(max(w.opts.mirrorGrace/4, time.Minute), time.Hour)
	for {
		timer := time.NewTimer(every)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C:
		}
		w.collectMirrors()
	}
}

// collectMirrors removes unused mirrors past their grace. It does nothing
// until every source has given its set, so that a restart never takes a
// mirror for unused before its targets are known.
func (w *Watcher) collectMirrors() {
	w.mu.Lock()
	for _, r := range w.routes {
		if !r.synced {
			w.mu.Unlock()
			return
		}
	}
	used := make(map[string]bool, len(w.remotes))
	for _, r := range w.remotes {
		used[filepath.Base(r.dir)] = true
	}
	for _, dir := range w.env.subs.dirs() {
		used[dir] = true
	}
	for dir := range w.opening {
		used[dir] = true
	}
	doomed, err := w.cache.Unused(used, w.opts.mirrorGrace)
	w.mu.Unlock()
	if err != nil {
		w.log.Error(err, "collect unused mirrors")
		return
	}
	for _, dir := range doomed {
		if err := os.RemoveAll(dir); err != nil {
			w.log.Error(err, "remove unused mirror", "dir", dir)
			continue
		}
		w.log.Info("unused mirror removed", "dir", dir, "grace", w.opts.mirrorGrace)
	}
}
