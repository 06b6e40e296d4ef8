package watcher

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/mirror"
)

// readsTree digests the tree of the target's path with the trees (or
// blobs) of reads at the commit wanted; a read path that is gone counts
// as such. Without reads it is the path's tree.
func readsTree(ctx context.Context, want *commitOffer, reads []string) (gitutil.Hash, error) {
	if len(reads) == 0 {
		return want.tree, nil
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00", want.tree)
	for _, r := range reads {
		th, err := want.mirror.TreeHash(ctx, want.commit, mirror.Selection{Path: r})
		switch {
		case errors.Is(err, mirror.ErrPathNotFound):
			fmt.Fprintf(h, "%s\x00-\x00", r)
		case err != nil:
			return gitutil.Hash{}, err
		default:
			fmt.Fprintf(h, "%s\x00%s\x00", r, th)
		}
	}
	return gitutil.Hash(h.Sum(nil)[:20]), nil
}

// reportedReads is what a delivery's report says it read outside the
// target's path (see Dependent).
func reportedReads(report any) []string {
	if dep, ok := report.(Dependent); ok {
		return dep.Reads()
	}
	return nil
}
