// Package webhook turns push notifications into push hints: the watcher
// polls the pushed repository at once instead of at its next interval.
//
// [Handler] is an http.Handler for the push and tag webhooks of GitHub,
// GitLab, Gitea and Forgejo, Gogs, Bitbucket Cloud and Server, and a generic
// HMAC form. It verifies each provider's signature or token in constant
// time, caps the body, extracts every URL of the repository from the payload
// and calls Trigger for it; it never trusts the payload's commit, since the
// poll finds the truth. Hints are coalesced and rate-limited per repository,
// so a burst of pushes costs one poll.
//
// [Subscriber] keeps one long-lived subscription (a [Stream]) for the whole
// set of watched repositories, restarting it only when that set changes, and
// turns each message into a hint. [SSE] is a Stream over server-sent events.
package webhook
