package watcher

// HostLine is how many hints and background polls wait in host's line
// (hostgate.Gate.Line), for the tests of the order of turns. The watcher
// must be running.
func (w *Watcher) HostLine(host string) (hints, background int) {
	hints, background, _ = w.env.hosts.Line(host)
	return hints, background
}
