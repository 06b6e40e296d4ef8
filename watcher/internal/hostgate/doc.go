// Package hostgate gives the watcher's requests their turns at each host:
// a budget of requests in progress and per second per host, a host's rate
// limit honoured by every remote on it, hosts taking turns at the listing
// slots, and hints ahead of background polls.
package hostgate
