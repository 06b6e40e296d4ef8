package watcher

import (
	"context"
	"errors"

	"github.com/modwatch/modwatch/gitutil"
)

// targetFailed reports a TargetFailed or RefVanished event: to the
// observers each time, to the log when the target's state changes.
func (v *env) targetFailed(e Event) {
	why := e.Err
	if next := (*RetryError)(nil); errors.As(why, &next) {
		why = next.Err // the same failure, whenever the next poll
	}
	if v.health.Fail(e.Target.ID, string(e.Type)+": "+why.Error()) {
		if e.Type == EventRefVanished {
			v.log.Info("the ref of a target vanished; the last delivery stays", "target", e.Target.ID, "remote", e.Remote, "ref", e.Ref)
		} else {
			v.log.Error(e.Err, "target failing", "target", e.Target.ID, "remote", e.Remote)
		}
	}
	v.emit(e)
}

// targetPolled records that a target was brought to a commit, res's,
// and reports whether it was failing, or not watched, before: it has
// recovered.
func (v *env) targetPolled(t Target, remote string, res gitutil.Resolved) bool {
	if !v.health.OK(t.ID) {
		return false
	}
	v.log.Info("target recovered", "target", t.ID, "remote", remote)
	v.emit(Event{Type: EventTargetRecovered, Target: &t, Remote: remote, Ref: res.Ref, Commit: res.Commit})
	return true
}

// rateLimited takes a listing's or a fetch's error at host: a rate limit
// stops every request to the host until its end. The first of an
// episode is logged and reported.
func (v *env) rateLimited(host, remote string, err error) {
	rl := (*gitutil.RateLimitError)(nil)
	if !errors.As(err, &rl) || !v.hosts.Pause(host, rl.Until, rl) {
		return
	}
	v.log.Info("host rate limited: no request to it until the end it gave", "host", rl.Host, "code", rl.Code, "until", rl.Until, "remote", remote)
	v.emit(Event{Type: EventRateLimited, Remote: remote, Err: rl})
}

// atHost runs fn, requests to host for remote, in a turn at host (see
// hostgate.Gate.Acquire), and takes a rate limit in its error.
func (v *env) atHost(ctx context.Context, host, remote string, fn func() error) error {
	if err := v.hosts.Acquire(ctx, host); err != nil {
		return err
	}
	defer v.hosts.Release(host, false)
	err := fn()
	v.rateLimited(host, remote, err)
	return err
}
