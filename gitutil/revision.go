package gitutil

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/Masterminds/semver/v3"
	"github.com/go-git/go-git/v5/plumbing"
)

// Errors of revision parsing and resolution, for errors.Is. They reach
// callers wrapped in a [*RevisionError].
var (
	ErrInvalidRevision   = errors.New("gitutil: invalid revision")
	ErrRefNotFound       = errors.New("gitutil: ref not found")
	ErrAmbiguousRevision = errors.New("gitutil: ambiguous revision")
	ErrAbbreviatedSHA    = errors.New("gitutil: abbreviated commit SHA")
	ErrNoMatchingTag     = errors.New("gitutil: no tag matches the semver range")
)

// RevisionError says which revision failed and why.
type RevisionError struct {
	Revision string
	Err      error
}

func (e *RevisionError) Error() string {
	return fmt.Sprintf("revision %q: %v", e.Revision, e.Err)
}

func (e *RevisionError) Unwrap() error { return e.Err }

// RevisionKind tells how a revision is resolved.
type RevisionKind int

// The kinds of revision.
const (
	// RevisionHead follows the remote's HEAD (the revision "" or "HEAD").
	RevisionHead RevisionKind = iota
	// RevisionRef is a full ref name ("refs/heads/main").
	RevisionRef
	// RevisionName is a short branch or tag name, or a semver range
	// (tried when no branch or tag has that name).
	RevisionName
	// RevisionCommit is a full 40-hex commit SHA.
	RevisionCommit
	// RevisionSemver is a semver range over tags alone, written
	// SemverPrefix + range ("semver:>=1.2 <2"), as Flux's spec.ref.semver
	// reads: the highest tag whose name is a version of three parts
	// (x.y.z, "v" allowed) within the range; a branch or tag named like
	// the range is not read.
	RevisionSemver
)

// SemverPrefix begins a [RevisionSemver]: ':' is in no ref name, so no
// branch or tag can be named like one.
const SemverPrefix = "semver:"

// Revision is a parsed target revision.
type Revision struct {
	Kind RevisionKind
	// Value is the ref, name or lower-case SHA; "" for RevisionHead.
	Value string
	// Semver is the range the name also parses as, or nil.
	Semver *semver.Constraints
}

// String returns the revision as written in canonical form.
func (r Revision) String() string {
	switch r.Kind {
	case RevisionHead:
		return "HEAD"
	case RevisionSemver:
		return SemverPrefix + r.Value
	}
	return r.Value
}

var (
	fullSHA  = regexp.MustCompile(`^[0-9a-fA-F]{40}$`)
	shortSHA = regexp.MustCompile(`^[0-9a-fA-F]{4,39}$`)
	sha256ID = regexp.MustCompile(`^[0-9a-fA-F]{64}$`)
)

// ParseRevision parses a target revision: "" or "HEAD" (the remote's
// default branch), a full ref ("refs/heads/main", "refs/tags/v1.2.0"), a
// short branch or tag name ("main", "v1.2.0"), a full 40-hex commit SHA, or a
// semver range over tags (">=1.2 <2", "~1.4", "1.x"). Names are matched
// exactly against branches and tags first; the semver reading is used only
// when no branch or tag has that name. Hex digits that are not a name
// (an abbreviated SHA, which is refused) read as a range when tags match
// it ("2024", CalVer's year). SemverPrefix and a range is a range over
// tags alone ([RevisionSemver]).
func ParseRevision(s string) (Revision, error) {
	raw := s
	s = strings.TrimSpace(s)
	fail := func(why string) (Revision, error) {
		return Revision{}, &RevisionError{Revision: raw, Err: fmt.Errorf("%w: %s", ErrInvalidRevision, why)}
	}
	switch {
	case s == "" || s == "HEAD":
		return Revision{Kind: RevisionHead}, nil
	case fullSHA.MatchString(s):
		return Revision{Kind: RevisionCommit, Value: strings.ToLower(s)}, nil
	case sha256ID.MatchString(s):
		return fail("SHA-256 repositories are not supported")
	case len(s) > 1024:
		return fail("longer than 1024 bytes")
	case strings.HasPrefix(s, "-") || strings.Contains(s, "/-"):
		// git would read it as an option.
		return fail("a name or path segment starting with \"-\"")
	case strings.HasPrefix(s, "refs/"):
		if err := plumbing.ReferenceName(s).Validate(); err != nil {
			return fail("not a valid ref name")
		}
		return Revision{Kind: RevisionRef, Value: s}, nil
	case strings.HasPrefix(s, SemverPrefix):
		rng := strings.TrimSpace(strings.TrimPrefix(s, SemverPrefix))
		c, err := semver.NewConstraint(rng)
		if err != nil || rng == "" {
			return fail("not a semver range after " + SemverPrefix)
		}
		return Revision{Kind: RevisionSemver, Value: rng, Semver: c}, nil
	}
	r := Revision{Kind: RevisionName, Value: s}
	if c, err := semver.NewConstraint(s); err == nil {
		r.Semver = c
	}
	if r.Semver == nil {
		if err := plumbing.ReferenceName("refs/heads/" + s).Validate(); err != nil {
			return fail("neither a valid branch or tag name nor a semver range")
		}
	}
	return r, nil
}

// Resolved is a revision resolved against a remote's refs.
type Resolved struct {
	// Ref is the full ref name the commit came from, or "" for a commit
	// revision.
	Ref string
	// Commit is the commit (annotated tags peeled).
	Commit Hash
}

// Resolve resolves rev against a ref listing. A commit revision resolves to
// itself without looking at refs. Errors are [*RevisionError] wrapping
// [ErrRefNotFound], [ErrAmbiguousRevision], [ErrAbbreviatedSHA] or
// [ErrNoMatchingTag].
func Resolve(rev Revision, refs RefList) (Resolved, error) {
	fail := func(err error) (Resolved, error) {
		return Resolved{}, &RevisionError{Revision: rev.String(), Err: err}
	}
	switch rev.Kind {
	case RevisionCommit:
		h, err := ParseHash(rev.Value)
		if err != nil {
			return fail(err)
		}
		return Resolved{Commit: h}, nil
	case RevisionHead:
		if refs.Head != "" {
			if h, ok := refs.Commit(refs.Head); ok {
				return Resolved{Ref: refs.Head, Commit: h}, nil
			}
		}
		return fail(fmt.Errorf("%w: the remote advertises no HEAD", ErrRefNotFound))
	case RevisionRef:
		if h, ok := refs.Commit(rev.Value); ok {
			return Resolved{Ref: rev.Value, Commit: h}, nil
		}
		return fail(ErrRefNotFound)
	case RevisionSemver:
		return resolveSemver(rev, refs)
	}
	branch, tag := "refs/heads/"+rev.Value, "refs/tags/"+rev.Value
	bh, isBranch := refs.Commit(branch)
	th, isTag := refs.Commit(tag)
	switch {
	case isBranch && isTag:
		return fail(fmt.Errorf("%w: both a branch and a tag are named %q; write %s or %s", ErrAmbiguousRevision, rev.Value, branch, tag))
	case isBranch:
		return Resolved{Ref: branch, Commit: bh}, nil
	case isTag:
		return Resolved{Ref: tag, Commit: th}, nil
	case shortSHA.MatchString(rev.Value):
		if rev.Semver != nil { // "2024": a range of tags (CalVer) when some match
			if r, err := resolveSemver(rev, refs); err == nil {
				return r, nil
			}
		}
		return fail(fmt.Errorf("%w: write the full 40-character SHA", ErrAbbreviatedSHA))
	case rev.Semver != nil:
		return resolveSemver(rev, refs)
	}
	return fail(fmt.Errorf("%w: no branch or tag named %q", ErrRefNotFound, rev.Value))
}

func resolveSemver(rev Revision, refs RefList) (Resolved, error) {
	type cand struct {
		v   *semver.Version
		ref string
	}
	var cands []cand
	for name := range refs.Refs {
		t, ok := strings.CutPrefix(name, "refs/tags/")
		if !ok {
			continue
		}
		if rev.Kind == RevisionSemver && strings.Count(t, ".") < 2 {
			continue // Flux's versions have three parts
		}
		v, err := semver.NewVersion(t)
		if err != nil || !rev.Semver.Check(v) {
			continue
		}
		cands = append(cands, cand{v, name})
	}
	if len(cands) == 0 {
		return Resolved{}, &RevisionError{Revision: rev.String(), Err: ErrNoMatchingTag}
	}
	sort.Slice(cands, func(i, j int) bool {
		if c := cands[i].v.Compare(cands[j].v); c != 0 {
			return c > 0
		}
		// "v1.0.0" and "1.0.0" tie as versions; pick one deterministically.
		return cands[i].ref < cands[j].ref
	})
	h, _ := refs.Commit(cands[0].ref)
	return Resolved{Ref: cands[0].ref, Commit: h}, nil
}
