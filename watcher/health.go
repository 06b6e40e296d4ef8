package watcher

import (
	"sync"
)

// health remembers which targets are failing and why, so that a failure is
// logged once when it starts or changes and once when it ends, not on
// every poll, and so that Stats can count them.
type health struct {
	mu      sync.Mutex
	failing map[string]string // target ID → event type and error
}

// fail records that a target failed; it reports whether this is news (a
// new failure, or another reason than the last).
func (h *health) fail(id, why string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failing[id] == why {
		return false
	}
	h.failing[id] = why
	return true
}

// ok records that a target was polled without failing; it reports whether
// it was failing before.
func (h *health) ok(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, was := h.failing[id]
	delete(h.failing, id)
	return was
}

// keep forgets the targets that are no longer watched.
func (h *health) keep(ids map[string]bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for id := range h.failing {
		if !ids[id] {
			delete(h.failing, id)
		}
	}
}

func (h *health) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.failing)
}

// targetFailed reports a TargetFailed or RefVanished event: to the
// observers each time, to the log when the target's state changes.
func (v *env) targetFailed(e Event) {
	if v.health.fail(e.Target.ID, string(e.Type)+": "+e.Err.Error()) {
		if e.Type == EventRefVanished {
			v.log.Info("the ref of a target vanished; the last delivery stays", "target", e.Target.ID, "remote", e.Remote, "ref", e.Ref)
		} else {
			v.log.Error(e.Err, "target failing", "target", e.Target.ID, "remote", e.Remote)
		}
	}
	v.emit(e)
}

// targetPolled records that a target was brought to a commit.
func (v *env) targetPolled(t Target, remote string) {
	if v.health.ok(t.ID) {
		v.log.Info("target recovered", "target", t.ID, "remote", remote)
	}
}
