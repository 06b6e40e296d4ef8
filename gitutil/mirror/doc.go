// Package mirror holds the local copy of a git remote that the watcher
// fetches into and reads from, written against go-git and the git CLI:
//
//   - A [Mirror] is a bare repository on disk per remote, fetched into
//     incrementally, rebuilt by itself when it finds itself damaged (at
//     open, after a fetch, or on any read error, including those of the
//     file systems it hands out) or locked, and repacked when its packs
//     pile up. A fetch after a listing is one request, for a thin pack
//     (deltas against what the mirror has, completed before it is stored).
//     Pack indexes are read in place (large ones mapped), not decoded into
//     memory, and shared by the mirror and its file systems.
//   - It answers the questions the scheduler asks before doing heavy
//     work: the tree hash of a [Selection] at a commit, the paths that
//     changed between two commits, whether one commit descends from
//     another, and a read-only [io/fs.FS] of a selection at a commit.
//   - It checks commit and tag signatures against a [KeyRing].
//   - For programs that manage a repository as git-sync does: [Mirror.Trim]
//     and [Mirror.Deepen] keep it to a depth, [Options.ShallowDepth] fetches
//     that deep, [Options.Filter] makes it a partial clone of git's own
//     ([ValidFilter]), and [Options.OnFallback] says when go-git stood in
//     for a git CLI that failed.
//
// Its remote is named and reached with gitutil's vocabulary (URLs,
// [github.com/modwatch/modwatch/gitutil.Auth], hashes); its protocol
// version 2 requests share a [github.com/modwatch/modwatch/gitutil.Lister]
// ([Options.Lister]).
package mirror
