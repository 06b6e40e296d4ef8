package mirror

import (
	"errors"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/object"
)

// LinkTracer is implemented by the file systems of [Mirror.FS]. What a
// reader of such a file system depends on is not only the names it asks
// for: a name that goes through a symbolic link reads wherever the link
// leads, which may be far from the name (a kustomization's "base" that
// is a link to "../../shared/base"). A caller that must know what was
// read, to read it again when it changes (the watcher, for what a
// delivery's render read), learns it here.
type LinkTracer interface {
	// TraceLinks has fn called, from then on, with the paths relative to
	// the repository's root ("." for the root) that a lookup reads through
	// symbolic links: each link it follows, the file or directory the
	// link's target leads to, and the one the lookup reaches through them
	// (under the target, or not when a ".." leaves it). A target that
	// leaves the tree, names nothing or loops is not reported; the link
	// that holds it is. A path may be reported many times. fn is called
	// before the operation returns, once the file system let its lock go:
	// it may use the file system. A lookup that follows no link calls
	// nothing. nil stops the calls.
	TraceLinks(fn func(path string))
}

var _ LinkTracer = (*treeFS)(nil)

// TraceLinks implements [LinkTracer].
func (f *treeFS) TraceLinks(fn func(path string)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.trace = fn
}

// trail is what one walk of a name (see walk) followed through symbolic
// links: it counts the hops and, when the file system is traced, reports
// the links, where their targets lead and what the walk reaches. Until a
// link is followed, or without a trace, it costs nothing.
type trail struct {
	f    *treeFS
	hops int
	// marks are, for each link whose target is being walked, innermost
	// last, how many elements of the name were left after the link: once
	// the walk is back to that many, the target is walked and the
	// directory reached is where it leads.
	marks []int
}

// follow is the link e, at rel, followed with remaining elements of the
// name after it: the elements of its target, to walk next.
func (t *trail) follow(e *object.TreeEntry, rel []string, remaining int) ([]string, error) {
	t.hops++
	if t.hops > maxSymlinkHops {
		return nil, errors.New("too many levels of symbolic links")
	}
	t.report(rel)
	elems, err := t.f.linkElems(e)
	if err != nil {
		return nil, err
	}
	if t.f.trace != nil {
		t.marks = append(t.marks, remaining)
	}
	return elems, nil
}

// landed reports the directory names as where the links whose targets
// are walked lead, once the walk is back to remaining elements after them.
func (t *trail) landed(names []string, remaining int) {
	if n := len(t.marks); n == 0 || t.marks[n-1] != remaining {
		return
	}
	for len(t.marks) > 0 && t.marks[len(t.marks)-1] == remaining {
		t.marks = t.marks[:len(t.marks)-1]
	}
	t.report(names)
}

// reached is the node the walk ends at: when any link was followed, what
// was reached through them, which is also where the links whose targets
// were still walked lead (the name has no element left after them).
func (t *trail) reached(n node) node {
	if t.hops > 0 {
		t.marks = t.marks[:0]
		t.report(n.rel)
	}
	return n
}

// report has the trace, if any, called with rel as a path of the
// repository, once the operation let f.mu go (see checked).
func (t *trail) report(rel []string) {
	if t.f.trace == nil {
		return
	}
	p := strings.Join(rel, "/")
	switch {
	case t.f.prefix == "" && p == "":
		p = "."
	case t.f.prefix == "":
	case p == "":
		p = t.f.prefix
	default:
		p = t.f.prefix + "/" + p
	}
	t.f.traced = append(t.f.traced, p)
}
