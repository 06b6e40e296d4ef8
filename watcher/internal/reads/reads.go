package reads

import (
	"io/fs"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/modwatch/modwatch/gitutil/mirror"
)

// Max bounds the paths outside its own that a target's delivery is
// remembered to have read.
const Max = 256

// Of returns what a delivery read outside path: what its report says it
// read (reported), and what the file systems it was handed read through
// symbolic links (linked), cleaned, sorted and bounded, without a path
// under another; nil when it read nothing there.
func Of(reported, linked []string, path string) []string {
	if path == "" {
		return nil // the whole repository is the path
	}
	var out []string
	for _, r := range reported {
		if c, ok := outside(r, path); ok {
			out = append(out, c)
		}
	}
	out = append(out, linked...)
	slices.Sort(out)
	out = slices.Compact(out)
	kept := out[:0]
	for _, r := range out {
		if !underAny(r, kept) {
			kept = append(kept, r)
		}
	}
	if len(kept) > Max {
		kept = kept[:Max]
	}
	if len(kept) == 0 {
		return nil
	}
	return kept
}

// outside cleans r, a path of the repository read for the target at path,
// and reports whether it is worth watching: valid, not inside path (it is
// watched already) and not a directory above it (too wide to be a
// dependency).
func outside(r, path string) (string, bool) {
	c, err := mirror.CleanPath(r)
	if err != nil || c == "" || c == path || strings.HasPrefix(c, path+"/") {
		return "", false
	}
	if strings.HasPrefix(path, c+"/") {
		return "", false
	}
	return c, true
}

// underAny reports whether r is below one of dirs, which are sorted: a
// path under a directory read is read with it.
func underAny(r string, dirs []string) bool {
	for dir := r; ; {
		i := strings.LastIndexByte(dir, '/')
		if i < 0 {
			return false
		}
		dir = dir[:i]
		if _, ok := slices.BinarySearch(dirs, dir); ok {
			return true
		}
	}
}

// Links collects, for one delivery, what the file systems it is handed
// read through symbolic links outside the target's path (see
// mirror.LinkTracer): the names a sink asks for do not show it (a
// kustomization's "base" that is a link to "../../shared/base"), so no
// report of the sink's can say it. Paths under one it has are not kept; it
// keeps at most Max.
type Links struct {
	path string // the target's

	mu    sync.Mutex
	paths map[string]bool
}

// NewLinks returns the collector of a delivery of a target whose path is
// path.
func NewLinks(path string) *Links { return &Links{path: path} }

// Trace has fsys, when it can say what it reads through links, report it
// to l; nothing is collected for a target whose path is the repository's
// root (everything is inside it).
func (l *Links) Trace(fsys fs.FS) {
	if t, ok := fsys.(mirror.LinkTracer); ok && l.path != "" {
		t.TraceLinks(l.add)
	}
}

// add is the file systems' trace: it runs once each operation of theirs
// let its lock go, before the operation returns.
func (l *Links) add(p string) {
	c, ok := outside(p, l.path)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.paths[c] || len(l.paths) >= Max {
		return
	}
	for dir := c; ; {
		i := strings.LastIndexByte(dir, '/')
		if i < 0 {
			break
		}
		if dir = dir[:i]; l.paths[dir] {
			return
		}
	}
	if l.paths == nil {
		l.paths = map[string]bool{}
	}
	l.paths[c] = true
}

// List is what l collected so far.
func (l *Links) List() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Collect(maps.Keys(l.paths))
}
