package watcher

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"time"
)

// mirrorName matches the directories of mirrors in the cache directory
// (see update); nothing else there is ever collected.
var mirrorName = regexp.MustCompile(`^[0-9a-f]{24}$`)

// gcSuffix marks a mirror being removed; a killed process's are cleared at
// start.
const gcSuffix = ".gc"

// touchesPerGrace: a polled mirror's time is at most a grace/touchesPerGrace
// old, so a killed process's mirrors last at least 7/8 of the grace.
const touchesPerGrace = 8

// touchMirror records that a mirror is in use, as its directory's
// modification time, which survives restarts. A remote does so when it
// ends, and when it polls if it has not for touchesPerGrace of the grace:
// a system call on every poll is 8% of a no-change poll's CPU.
func (v *env) touchMirror(dir string) {
	now := time.Now()
	_ = os.Chtimes(dir, now, now)
}

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
	entries, err := os.ReadDir(w.opts.cacheDir)
	if err != nil {
		w.mu.Unlock()
		w.log.Error(err, "collect unused mirrors")
		return
	}
	now := time.Now()
	var doomed []string
	for _, e := range entries {
		if !e.IsDir() || !mirrorName.MatchString(e.Name()) || used[e.Name()] {
			continue
		}
		info, err := e.Info()
		if err != nil || now.Sub(info.ModTime()) < w.opts.mirrorGrace {
			continue
		}
		// Renamed under w.mu, so that no remote opens it meanwhile;
		// removed outside, since a large mirror takes a while.
		dir := filepath.Join(w.opts.cacheDir, e.Name())
		if err := os.Rename(dir, dir+gcSuffix); err == nil {
			doomed = append(doomed, dir+gcSuffix)
		}
	}
	w.mu.Unlock()
	for _, dir := range doomed {
		if err := os.RemoveAll(dir); err != nil {
			w.log.Error(err, "remove unused mirror", "dir", dir)
			continue
		}
		w.log.Info("unused mirror removed", "dir", dir, "grace", w.opts.mirrorGrace)
	}
}
