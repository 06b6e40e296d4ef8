// Package gitutil is the vocabulary of a git remote, free of any
// Kubernetes or GitSync type, that the watcher and its mirror speak:
//
//   - [Hash] names an object; [ParseHash] reads one.
//   - [ParseURL], [NormalizeURL] and [RedactURL] give every remote one name
//     and keep secrets out of logs and errors; [MergeURLCredentials] takes
//     credentials out of a URL.
//   - [Auth] describes credentials, [CredentialResolver] finds them for a
//     URL ([StaticCredentials], and gitutil/githubapp's GitHub App tokens).
//   - [Revision] and [Resolve] turn a branch, tag, full SHA or semver range
//     into a commit, against a ref listing.
//   - A [Lister] lists a remote's refs in one request ([Lister.ListRefs]),
//     with annotated tags peeled, and keeps, bounded, what it learned of
//     the remote's server; [ListRefs] is a listing that keeps nothing.
//
// The on-disk mirror of a remote, fetched into and read from, is
// gitutil/mirror.
package gitutil
