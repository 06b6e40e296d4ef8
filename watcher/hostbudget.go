package watcher

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/watcher/internal/hostgate"
)

// DefaultHostInFlight is how many requests a watcher has in progress at
// one host by default (see [HostBudget]).
const DefaultHostInFlight = 8

// HostBudget is what a watcher sends one host (a forge: "github.com",
// "gitlab.example.com:8443"), across every remote, target and tenant on
// it: listings and fetches alike.
//
// The default is [DefaultHostInFlight] requests in progress and no bound
// on their rate. Requests in progress bound the rate by the host's own
// pace: a host answering a listing in 100 ms is sent at most 80 a second,
// a loaded host that answers slower is sent fewer. Whatever its budget, a
// host holds half the listing slots at most (see [Concurrency]), so a
// slow host leaves the other half to the others. A rate is per forge
// knowledge: a
// self-hosted server of thousands of repositories takes far more than a
// public forge will from one client; set it for the forges a watcher
// polls ([WithHostBudget]). Whatever the budget, a host's own answer that
// it limits the client (429, 503 with Retry-After, GitHub's and GitLab's
// rate-limit headers: see [gitutil.ParseRateLimit]) stops every request
// to it until the end it gives. (A server that speaks only protocol
// version 0 is listed by go-git, which keeps no header of a 403: its 403
// rate limit is an authorization failure, backed off as one.)
type HostBudget struct {
	// PerSecond bounds the requests sent to the host per second; 0 sets
	// no bound.
	PerSecond float64
	// Burst is how many requests may go at once above the rate after a
	// quiet time (default: PerSecond; at least 2, what a fetch costs).
	Burst int
	// InFlight bounds the requests in progress at the host (default
	// DefaultHostInFlight).
	InFlight int
}

// validate says what is wrong with b, if anything.
func (b HostBudget) validate() error {
	switch {
	case b.PerSecond < 0 || math.IsNaN(b.PerSecond) || math.IsInf(b.PerSecond, 0):
		return fmt.Errorf("a PerSecond of %v is not a rate", b.PerSecond)
	case b.Burst < 0:
		return fmt.Errorf("a Burst of %d is negative", b.Burst)
	case b.InFlight < 0:
		return fmt.Errorf("an InFlight of %d is negative", b.InFlight)
	}
	return nil
}

// withDefaults fills b's zero fields.
func (b HostBudget) withDefaults() hostgate.Budget {
	out := hostgate.Budget{PerSecond: b.PerSecond, Burst: b.Burst, InFlight: b.InFlight}
	if out.InFlight == 0 {
		out.InFlight = DefaultHostInFlight
	}
	if out.Burst == 0 {
		out.Burst = max(int(b.PerSecond), 1)
	}
	return out
}

// WithHostBudget sets the budget of requests to host (a host name, with
// its port when not the scheme's default, as in a remote's URL: any case),
// or of every host that has none of its own when host is "". A budget for
// one host set twice is refused. Local repositories (file URLs, paths)
// are no host's: they have the default budget without its rate. See
// [HostBudget].
func WithHostBudget(host string, b HostBudget) Option {
	return func(o *options) {
		name := fmt.Sprintf("WithHostBudget(%q)", host)
		key := strings.ToLower(host)
		o.setOnce("budget of host "+key, name)
		if err := b.validate(); err != nil {
			o.invalid = append(o.invalid, fmt.Sprintf("%s: %v", name, err))
			return
		}
		if host != "" && !validHost(key) {
			o.invalid = append(o.invalid, fmt.Sprintf("%s: not a host name", name))
			return
		}
		if o.hostBudgets == nil {
			o.hostBudgets = map[string]HostBudget{}
		}
		o.hostBudgets[key] = b
	}
}

// validHost reports whether host is a remote's host as its URL gives it
// (Endpoint.Host), over HTTPS or HTTP: "h", "h:8443", "h:443" (an HTTP
// URL's).
func validHost(host string) bool {
	for _, scheme := range []string{"https://", "http://"} {
		if e, err := gitutil.ParseURL(scheme + host + "/r"); err == nil && e.Host == host {
			return true
		}
	}
	return false
}

// hostBudget is the budget of host; local repositories' has no rate.
func (o *options) hostBudget(host string) hostgate.Budget {
	if b, ok := o.hostBudgets[host]; ok && host != localHost {
		return b.withDefaults()
	}
	b := o.hostBudgets[""]
	if host == localHost {
		b.PerSecond, b.Burst = 0, 0
	}
	return b.withDefaults()
}

// localHost is where local repositories' requests go, as the gate
// names it: no host name is empty.
const localHost = ""

// hostOf is the host of a remote's URL (Endpoint.Host), whose budget it
// spends; localHost for a local repository.
func hostOf(url string) string {
	e, err := gitutil.ParseURL(url)
	if err != nil || e.Scheme == "file" {
		return localHost
	}
	return e.Host
}

// RetryError is a failed poll's error, as its targets are told it, with
// when their remote is polled next: after a backoff, or at the end of its
// host's rate limit.
type RetryError struct {
	Err error
	At  time.Time
}

func (e *RetryError) Error() string {
	return e.Err.Error() + "; next poll at " + e.At.UTC().Format(time.RFC3339)
}

func (e *RetryError) Unwrap() error { return e.Err }
