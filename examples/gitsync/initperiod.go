package main

import (
	"maps"
	"slices"
	"sync"

	"github.com/modwatch/modwatch/gitutil"
)

// initialSync is the end of --init-period: the first sync of the
// repository (published, or found published by the process's first).
// git-sync makes no attempt after it for --period, and none is under way
// at it: its attempts are one at a time. Here polls and the publishing go
// on side by side, so at the first sync:
//
//   - the pokes that keep --init-period (see repoSource) stop at once,
//     not when the watcher next hears of another interval;
//   - a listing of the repository under way at it, or asked for by one of
//     those pokes and begun after it, answers what the last listing
//     before it answered: that poll finds nothing new, where git-sync
//     would have made none. A commit made after the first sync is had at
//     the next period (or push hint, or signal).
type initialSync struct {
	ended chan struct{} // closed at the first sync

	mu       sync.Mutex
	done     bool
	poked    bool             // a poke's poll has not listed yet
	last     *gitutil.RefList // the last listing's answer before the first sync
	prefixes []string         // the prefixes last was listed under
}

func newInitialSync() *initialSync { return &initialSync{ended: make(chan struct{})} }

// end marks the first sync, before anything says it (the touch file, the
// hooks, the health endpoint).
func (i *initialSync) end() {
	i.mu.Lock()
	defer i.mu.Unlock()
	if !i.done {
		i.done = true
		close(i.ended)
	}
}

// poke asks for a poll of --init-period, by trigger (true when a poll was
// asked for), unless the first sync is over: none is asked for after it.
func (i *initialSync) poke(trigger func() bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if !i.done && trigger() {
		i.poked = true
	}
}

// list is a listing of the repository under prefixes, made by list, but
// for one under way at the first sync or begun after it for a poke of
// --init-period, which answers as the last listing before it.
func (i *initialSync) list(prefixes []string, list func() (gitutil.RefList, error)) (gitutil.RefList, error) {
	i.mu.Lock()
	before, late := !i.done, i.done && i.poked
	i.poked = false
	if late {
		if refs, ok := i.lastLocked(prefixes); ok {
			i.mu.Unlock()
			return refs, nil
		}
	}
	i.mu.Unlock()
	refs, err := list()
	i.mu.Lock()
	defer i.mu.Unlock()
	switch {
	case !before:
		return refs, err // a period's, a push hint's, a signal's
	case !i.done:
		if err == nil {
			kept := cloneRefs(refs)
			i.last, i.prefixes = &kept, slices.Clone(prefixes)
		}
		return refs, err
	}
	if last, ok := i.lastLocked(prefixes); ok {
		return last, nil // under way at the first sync
	}
	return refs, err
}

// lastLocked is a copy of the last listing before the first sync, when
// there is one under prefixes; the caller holds i.mu.
func (i *initialSync) lastLocked(prefixes []string) (gitutil.RefList, bool) {
	if i.last == nil || !slices.Equal(i.prefixes, prefixes) {
		return gitutil.RefList{}, false
	}
	return cloneRefs(*i.last), true
}

func cloneRefs(l gitutil.RefList) gitutil.RefList {
	return gitutil.RefList{Refs: maps.Clone(l.Refs), Peeled: maps.Clone(l.Peeled), Head: l.Head}
}
