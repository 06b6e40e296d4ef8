package watcher

// targetFailed reports a TargetFailed or RefVanished event: to the
// observers each time, to the log when the target's state changes.
func (v *env) targetFailed(e Event) {
	if v.health.Fail(e.Target.ID, string(e.Type)+": "+e.Err.Error()) {
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
	if v.health.OK(t.ID) {
		v.log.Info("target recovered", "target", t.ID, "remote", remote)
	}
}
