package gitutil

import (
	"sync/atomic"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// countingStorage is a mirror's object store that counts the tree objects
// read from it, so that "how much did checking this commit cost" is a
// number (see [Mirror.TreesRead]).
type countingStorage struct {
	*filesystem.Storage
	trees *atomic.Int64
}

// newCountingStorage opens the store in dir with opts.
func newCountingStorage(dir string, objectCache cache.Object, trees *atomic.Int64, opts filesystem.Options) countingStorage {
	st := filesystem.NewStorageWithOptions(osfs.New(dir), objectCache, opts)
	return countingStorage{Storage: st, trees: trees}
}

// EncodedObject reads an object, counting trees.
func (s countingStorage) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	o, err := s.Storage.EncodedObject(t, h)
	if err == nil && o.Type() == plumbing.TreeObject {
		s.trees.Add(1)
	}
	return o, err
}
