package watcher

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/modwatch/modwatch/gitutil"
)

// maxReads bounds the paths outside its own that a target's delivery is
// remembered to have read.
const maxReads = 256

// readsOf returns what a delivery's report says it read outside path,
// cleaned, sorted and bounded; nil when it says nothing.
func readsOf(report any, path string) []string {
	dep, ok := report.(Dependent)
	if !ok || path == "" {
		return nil // the whole repository is the path
	}
	var out []string
	for _, r := range dep.Reads() {
		c, err := gitutil.CleanPath(r)
		if err != nil || c == "" || c == path || strings.HasPrefix(c, path+"/") {
			continue // invalid, or inside the path: counted already
		}
		if strings.HasPrefix(path, c+"/") {
			continue // a directory above the path: too wide to be a dependency
		}
		out = append(out, c)
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) > maxReads {
		out = out[:maxReads]
	}
	return out
}

// readsTree digests the tree of the target's path with the trees (or
// blobs) of reads at the commit wanted; a read path that is gone counts
// as such. Without reads it is the path's tree.
func readsTree(ctx context.Context, want *desired, reads []string) (string, error) {
	if len(reads) == 0 {
		return want.tree.String(), nil
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00", want.tree)
	for _, r := range reads {
		th, err := want.mirror.TreeHash(ctx, want.commit, gitutil.Selection{Path: r})
		switch {
		case errors.Is(err, gitutil.ErrPathNotFound):
			fmt.Fprintf(h, "%s\x00-\x00", r)
		case err != nil:
			return "", err
		default:
			fmt.Fprintf(h, "%s\x00%s\x00", r, th)
		}
	}
	return "r" + hex.EncodeToString(h.Sum(nil)[:20]), nil
}
