// Package flux is a source over Flux GitRepository objects: each watched
// GitRepository is a target, so that a sink (sink/fluxreceiver) can tell
// Flux the moment its repository moves, instead of Flux finding out at its
// next interval.
//
// It uses a dynamic informer (no dependency on Flux's Go types) over the
// served version of gitrepositories.source.toolkit.fluxcd.io. When Flux is
// not installed it idles, looks again periodically, and starts watching
// when the CRD appears, without a restart; if the CRD is removed, its
// targets go and it idles again.
//
// Credentials come from spec.secretRef with Flux's keys (username and
// password, bearerToken, identity and known_hosts, ca.crt). With
// `provider: github` the Secret names a GitHub App installation
// (githubAppID, githubAppInstallationID, githubAppPrivateKey, and
// optionally githubAppBaseURL and ca.crt) and the target gets an
// installation token (gitutil/githubapp), for the App's host only. Other
// providers are reported and not watched. spec.verify makes the target's
// Verify, with its mode (HEAD, Tag, TagAndHEAD) and every key of its
// Secret: only what one of them signed is delivered.
package flux
