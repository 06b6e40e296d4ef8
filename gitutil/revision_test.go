package gitutil

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func h(c byte) Hash { return mustHash(strings.Repeat(string(c), 40)) }

var testRefs = RefList{
	Head: "refs/heads/main",
	Refs: map[string]Hash{
		"refs/heads/main":      h('a'),
		"refs/heads/dev":       h('b'),
		"refs/heads/both":      h('c'),
		"refs/tags/both":       h('d'),
		"refs/tags/v1.0.0":     h('1'),
		"refs/tags/v1.2.0":     h('e'), // annotated
		"refs/tags/1.3.0-rc.1": h('3'),
		"refs/tags/v2.0.0":     h('2'),
		"refs/heads/abcdef1":   h('f'),
	},
	Peeled: map[string]Hash{"refs/tags/v1.2.0": h('5')},
}

func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		name, rev string
		wantRef   string
		want      Hash
		wantErr   error
	}{
		{name: "head", rev: "", wantRef: "refs/heads/main", want: h('a')},
		{name: "HEAD", rev: "HEAD", wantRef: "refs/heads/main", want: h('a')},
		{name: "branch", rev: "dev", wantRef: "refs/heads/dev", want: h('b')},
		{name: "full ref", rev: "refs/heads/dev", wantRef: "refs/heads/dev", want: h('b')},
		{name: "lightweight tag", rev: "v1.0.0", wantRef: "refs/tags/v1.0.0", want: h('1')},
		{name: "annotated tag is peeled", rev: "v1.2.0", wantRef: "refs/tags/v1.2.0", want: h('5')},
		{name: "full sha", rev: strings.Repeat("9", 40), want: h('9')},
		{name: "upper-case sha", rev: strings.Repeat("A", 40), want: h('a')},
		{name: "semver range", rev: ">=1.0.0 <2.0.0", wantRef: "refs/tags/v1.2.0", want: h('5')},
		{name: "semver tilde", rev: "~1.0", wantRef: "refs/tags/v1.0.0", want: h('1')},
		{name: "semver x", rev: "2.x", wantRef: "refs/tags/v2.0.0", want: h('2')},
		{name: "branch that looks like a sha", rev: "abcdef1", wantRef: "refs/heads/abcdef1", want: h('f')},
		{name: "ambiguous", rev: "both", wantErr: ErrAmbiguousRevision},
		{name: "abbreviated sha", rev: "abc1234", wantErr: ErrAbbreviatedSHA},
		{name: "missing branch", rev: "nope", wantErr: ErrRefNotFound},
		{name: "missing full ref", rev: "refs/heads/nope", wantErr: ErrRefNotFound},
		{name: "no tag in range", rev: ">=3", wantErr: ErrNoMatchingTag},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rev, err := ParseRevision(tc.rev)
			require.NoError(t, err)
			got, err := Resolve(rev, testRefs)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				var rerr *RevisionError
				require.ErrorAs(t, err, &rerr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.wantRef, got.Ref)
			assert.Equal(t, tc.want, got.Commit)
		})
	}
}

// A revision of digits alone reads as a range when tags match it (a
// CalVer year, as Flux's semver takes it), and as an abbreviated SHA when
// none does.
func TestDigitsAreARangeWhenTagsMatch(t *testing.T) {
	refs := RefList{Refs: map[string]Hash{"refs/tags/2024.4.1": h('4'), "refs/tags/2024.5.0": h('5'), "refs/tags/2023.9.9": h('3')}}
	rev, err := ParseRevision("2024")
	require.NoError(t, err)
	got, err := Resolve(rev, refs)
	require.NoError(t, err)
	assert.Equal(t, Resolved{Ref: "refs/tags/2024.5.0", Commit: h('5')}, got)
	rev, err = ParseRevision("1234")
	require.NoError(t, err)
	_, err = Resolve(rev, refs)
	require.ErrorIs(t, err, ErrAbbreviatedSHA)
}

// A semver revision (SemverPrefix) reads tags alone, as Flux's
// spec.ref.semver does: a branch named like the range is not read, and a
// tag of two parts is no version.
func TestASemverRevisionReadsTagsAlone(t *testing.T) {
	refs := RefList{Refs: map[string]Hash{
		"refs/heads/1.x": h('b'), "refs/tags/1.x": h('c'), // named like the range
		"refs/tags/v1.4": h('4'), "refs/tags/v1.3.0": h('3'), "refs/tags/v1.2.9": h('2'),
	}}
	rev, err := ParseRevision("semver:1.x")
	require.NoError(t, err)
	assert.Equal(t, RevisionSemver, rev.Kind)
	assert.Equal(t, "semver:1.x", rev.String())
	assert.Equal(t, []string{"refs/tags/"}, rev.RefPrefixes())
	got, err := Resolve(rev, refs)
	require.NoError(t, err)
	assert.Equal(t, Resolved{Ref: "refs/tags/v1.3.0", Commit: h('3')}, got, "not the branch, not the tag named 1.x, not v1.4")

	plain, err := ParseRevision("1.x") // a name first, as before
	require.NoError(t, err)
	_, err = Resolve(plain, refs)
	require.ErrorIs(t, err, ErrAmbiguousRevision)

	for _, bad := range []string{"semver:", "semver:main", "semver: >=banana"} {
		_, err := ParseRevision(bad)
		require.ErrorIs(t, err, ErrInvalidRevision, bad)
	}
	rev, err = ParseRevision("semver:>=2")
	require.NoError(t, err)
	_, err = Resolve(rev, refs)
	require.ErrorIs(t, err, ErrNoMatchingTag)
}

func TestResolveHeadUnknown(t *testing.T) {
	rev, err := ParseRevision("")
	require.NoError(t, err)
	_, err = Resolve(rev, RefList{Refs: testRefs.Refs})
	require.ErrorIs(t, err, ErrRefNotFound)
}

func TestParseRevisionRejects(t *testing.T) {
	for _, bad := range []string{
		"refs/heads/a..b", "refs/heads/", "a b", "a:b", "~~", "refs/heads/x.lock",
		strings.Repeat("a", 64), "x\x00y", strings.Repeat("b", 2000),
		"--upload-pack=touch /tmp/x", "-b", "refs/heads/-x", "release/-x",
	} {
		t.Run(bad[:min(len(bad), 20)], func(t *testing.T) {
			_, err := ParseRevision(bad)
			require.ErrorIs(t, err, ErrInvalidRevision)
		})
	}
}

func FuzzParseRevision(f *testing.F) {
	for _, s := range []string{"", "main", "refs/tags/v1", ">=1.0 <2", strings.Repeat("a", 40), "abc", "~1.2", "a..b", "v1.2.3", "1.x || 2.x", "semver:>=1", "semver:~1.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rev, err := ParseRevision(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidRevision) {
				t.Fatalf("parse error of the wrong kind: %v", err)
			}
			return
		}
		got, err := Resolve(rev, testRefs)
		if err != nil {
			var rerr *RevisionError
			if !errors.As(err, &rerr) {
				t.Fatalf("resolve error is not a *RevisionError: %v", err)
			}
			return
		}
		if got.Commit.IsZero() {
			t.Fatalf("%q resolved to the zero hash", s)
		}
		if got.Ref != "" {
			if _, ok := testRefs.Refs[got.Ref]; !ok {
				t.Fatalf("%q resolved to a ref that does not exist: %s", s, got.Ref)
			}
		}
	})
}
