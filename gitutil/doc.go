// Package gitutil holds the git plumbing the watcher is built on, written
// against go-git and free of any Kubernetes or GitSync type:
//
//   - [ListRefs] lists a remote's refs in one request, with annotated tags
//     peeled.
//   - [Mirror] is a bare repository on disk per remote, fetched into
//     incrementally, rebuilt by itself when it finds itself damaged (at
//     open, after a fetch, or on any read error, including those of the file
//     systems it hands out) or locked, and repacked when its packs pile up.
//     A fetch after a listing is one request, for a thin pack (deltas
//     against what the mirror has, completed before it is stored). Pack
//     indexes are read in place (large ones mapped), not decoded into
//     memory, and shared by the mirror and its file systems.
//   - [Resolve] turns a revision (branch, tag, full SHA, semver range) into a
//     commit, against a ref listing.
//   - A mirror answers the questions the scheduler asks before doing heavy
//     work: the tree hash of a path at a commit, the paths that changed
//     between two commits under a prefix, whether one commit descends from
//     another, and a read-only [io/fs.FS] of a path at a commit.
//   - [Auth] describes credentials and [CredentialResolver] finds them for a
//     URL; [NormalizeURL] and [RedactURL] give every remote one name and keep
//     secrets out of logs and errors.
package gitutil
