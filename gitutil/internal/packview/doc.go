// Package packview holds a read-only, checked view of a repository's
// object store, as a mirror and each file system it hands out read it:
// packs read through indexes shared by every view (an [IndexCache]) and
// opened a few at a time, loose objects, and every object checked as it
// is read (its delta chain walked first, its content hashed against its
// name, its inflated size bounded by its header: [ErrMismatch], a
// [ReadError]); and the object caches views read through ([ObjectLRU],
// [IdleCache]).
package packview
