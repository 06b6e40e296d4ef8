package watcher

import (
	"io/fs"
	"sync"

	"github.com/modwatch/modwatch/gitutil/mirror"
)

// handout follows the trees of one delivery's Change. Once the sink's call
// returned, each is handed on (mirror.Detach): the watcher reads it no
// more, and whatever the sink kept of it counts among its mirror's kept
// trees, the oldest released past the bound ([WithKeptTrees]). Change.Root
// is opened at its first read, maybe after the call: it is handed on as
// it opens then.
type handout struct {
	mu   sync.Mutex
	over bool  // the call returned
	root fs.FS // Change.Root's, opened during the call
}

// opened takes Change.Root's file system as it opens.
func (h *handout) opened(root fs.FS) {
	h.mu.Lock()
	over := h.over
	if !over {
		h.root = root
	}
	h.mu.Unlock()
	if over {
		mirror.Detach(root)
	}
}

// handOn hands on fsys (Change.FS) and Change.Root's, if it opened: the
// sink's call returned.
func (h *handout) handOn(fsys fs.FS) {
	h.mu.Lock()
	h.over = true
	root := h.root
	h.root = nil
	h.mu.Unlock()
	mirror.Detach(fsys)
	mirror.Detach(root)
}

// keeper is a Mirror that says what the trees it handed out hold
// (gitutil's).
type keeper interface {
	Kept() mirror.KeptStats
}

// addKept adds what m's trees hold, when it says.
func (st *Stats) addKept(m Mirror) {
	if k, ok := m.(keeper); ok {
		ks := k.Kept()
		st.KeptTrees += ks.Trees
		st.KeptPackBytes += ks.PackBytes
	}
}
