package handout

import (
	"io/fs"
	"sync"

	"github.com/modwatch/modwatch/gitutil/mirror"
)

// Trees follows the trees of one delivery's Change. Once the sink's call
// returned, each is handed on (mirror.Detach): the watcher reads it no
// more, and whatever the sink kept of it counts among its mirror's kept
// trees, the oldest released past the bound (watcher.WithKeptTrees).
// Change.Root is opened at its first read, maybe after the call: it is
// handed on as it opens then. Its zero value follows a delivery.
type Trees struct {
	mu   sync.Mutex
	over bool  // the call returned
	root fs.FS // Change.Root's, opened during the call
}

// Opened takes Change.Root's file system as it opens.
func (h *Trees) Opened(root fs.FS) {
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

// HandOn hands on fsys (Change.FS) and Change.Root's, if it opened: the
// sink's call returned.
func (h *Trees) HandOn(fsys fs.FS) {
	h.mu.Lock()
	h.over = true
	root := h.root
	h.root = nil
	h.mu.Unlock()
	mirror.Detach(fsys)
	mirror.Detach(root)
}
