package mirror

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/modwatch/modwatch/gitutil"
)

// maxFilterLen bounds a filter spec: it is configuration, and hostile until
// checked.
const maxFilterLen = 64

// ValidFilter checks a filter spec for [Options.Filter].
//
// It takes git's "blob:none" or "blob:limit=<n>[kmg]", the filters that
// leave files out and keep every commit and tree. The others git takes (tree:<depth>,
// sparse:oid=, object:type=, combine:) leave out trees too, which every
// poll reads to tell whether a target's path changed: they are refused,
// by name.
func ValidFilter(spec string) error {
	if len(spec) > maxFilterLen {
		return fmt.Errorf("filter spec of %d bytes (at most %d)", len(spec), maxFilterLen)
	}
	if spec == "blob:none" {
		return nil
	}
	if n, ok := strings.CutPrefix(spec, "blob:limit="); ok {
		n = strings.TrimRight(n, "kmgKMG")
		if len(spec)-len("blob:limit=")-len(n) > 1 {
			return fmt.Errorf("filter %q: one unit at most (k, m or g)", spec)
		}
		if _, err := strconv.ParseUint(n, 10, 63); err != nil {
			return fmt.Errorf("filter %q: the limit is a number of bytes, with k, m or g", spec)
		}
		return nil
	}
	kind, _, _ := strings.Cut(spec, ":")
	switch kind {
	case "tree", "sparse", "object", "combine":
		return fmt.Errorf("filter %q: only blob:none and blob:limit=<n> are taken (a %s filter leaves out trees, which every poll reads)", spec, kind)
	}
	return fmt.Errorf("filter %q: not a filter spec (blob:none, blob:limit=<n>[kmg])", spec)
}

// fetchGitPartial is every fetch of refs into a mirror with a Filter (or
// CLIFetches): the git CLI's (see cliFetch), ShallowDepth deep when the
// mirror is empty or shallow. A server that ignores filters sends every file, as to git. It
// reports whether a ref moved. Callers hold m.mu.
func (m *Mirror) fetchGitPartial(ctx context.Context, topts gitutil.Transport, refs []string) (bool, error) {
	_, specs, err := cliRefSpecs(refs)
	if err != nil {
		return false, err
	}
	before := m.refHashes(refs)
	if err := m.cliFetch(ctx, topts, m.shallowArgs(), specs...); err != nil {
		return false, err
	}
	return m.moved(refs, before), nil
}

// shallowArgs are the depth of a fetch into a mirror with a Filter (or
// CLIFetches):
// ShallowDepth when the mirror is empty or shallow. Callers hold m.mu.
func (m *Mirror) shallowArgs() []string {
	if m.opts.ShallowDepth > 0 && (m.isEmpty() || m.shallow()) {
		return []string{fmt.Sprintf("--depth=%d", m.opts.ShallowDepth)}
	}
	return nil
}

// partialFilter is the filter a partial mirror's configuration names.
func (m *Mirror) partialFilter() string {
	if m.opts.Filter != "" {
		return m.opts.Filter
	}
	return fetchFilter
}
