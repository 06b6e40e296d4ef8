// Package leftovers holds what clears a mirror of its writers'
// temporaries, the crash's and the failed operation's. A failed operation
// leaves nothing behind in the mirror, at once: a temporary file can hold
// all the room a full disk had, and the start-up cleanup (ClearAll) comes
// only with the next process. An operation that may write notes the
// temporaries there are when it begins (Note) and, when it ends, removes
// those that appeared meanwhile (Noted.Clear): under the mirror's lock it
// has one writer, so they are the operation's own. The writers whose
// failure another writer follows in the same operation clean up as they
// fail, so that the next has the room: go-git's pack writer (PackFS) and
// the git CLI (the mirror's runGit). A lock file left outside the object
// store (StaleLocks) says the mirror was killed mid-write.
package leftovers
