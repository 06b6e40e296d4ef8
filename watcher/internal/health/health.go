package health

import "sync"

// Health remembers which targets are failing and why; its zero value
// remembers none.
type Health struct {
	mu      sync.Mutex
	failing map[string]string // target ID → event type and error
}

// Fail records that a target failed; it reports whether this is news (a
// new failure, or another reason than the last).
func (h *Health) Fail(id, why string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failing[id] == why {
		return false
	}
	if h.failing == nil {
		h.failing = map[string]string{}
	}
	h.failing[id] = why
	return true
}

// OK records that a target was polled without failing; it reports whether
// it was failing before.
func (h *Health) OK(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, was := h.failing[id]
	delete(h.failing, id)
	return was
}

// Keep forgets the targets that are no longer watched.
func (h *Health) Keep(ids map[string]bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for id := range h.failing {
		if !ids[id] {
			delete(h.failing, id)
		}
	}
}

// Count is how many targets are failing.
func (h *Health) Count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.failing)
}
