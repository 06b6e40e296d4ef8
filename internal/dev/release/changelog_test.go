package release_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/release"
)

const sha = "0123456789abcdef0123456789abcdef01234567"

func TestParseChangelogRefusesWhatItCannotRead(t *testing.T) {
	for _, tc := range []struct {
		name, text, err string
	}{
		{"empty", "", "no \"## [Unreleased]\" section"},
		{"no unreleased", "# Changelog\n\n## [0.1.0] - 2026-12-01\n", "no \"## [Unreleased]\""},
		{"unreleased twice", "## [Unreleased]\n## Unreleased\n", "comes once"},
		{"unreleased after a release", "## [0.1.0] - 2026-12-01\n## [Unreleased]\n", "comes once, before every release"},
		{"not a version", "## [Unreleased]\n## [next] - 2026-12-01\n", "not a release heading"},
		{"not canonical", "## [Unreleased]\n## [1.0] - 2026-12-01\n", "not a release heading"},
		{"no date", "## [Unreleased]\n## [1.0.0]\n", "not a release heading"},
		{"a heading of another shape", "## [Unreleased]\n## Release notes for everyone\n", "a section heading is"},
		{"oldest first", "## [Unreleased]\n## [0.1.0] - 2026-01-01\n## [0.2.0] - 2026-02-01\n", "newest first"},
		{"the same twice", "## [Unreleased]\n## [0.1.0] - 2026-01-01\n## [0.1.0] - 2026-01-01\n", "newest first"},
		{"control bytes", "## [Unreleased]\n## [0.1.0\x00] - 2026-01-01\n", "not a release heading"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := release.ParseChangelog([]byte(tc.text))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.err)
		})
	}
}

func TestChangelogLastRelease(t *testing.T) {
	cl, err := release.ParseChangelog([]byte("# C\n\n## [Unreleased]\n\n- next\n"))
	require.NoError(t, err)
	_, _, ok, err := cl.LastRelease()
	require.NoError(t, err)
	assert.False(t, ok, "no release yet")
	assert.Equal(t, "\n- next\n", cl.Unreleased())

	text := "## [Unreleased]\n\n## [0.2.0] - 2026-02-01\n\nReleased from commit " + sha + " (tags v0.2.0).\n\n- b\n\n## [0.1.0] - 2026-01-01\n\nReleased from commit " + strings.Repeat("f", 40) + ".\n"
	cl, err = release.ParseChangelog([]byte(text))
	require.NoError(t, err)
	v, commit, ok, err := cl.LastRelease()
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, "v0.2.0", v)
	assert.Equal(t, sha, commit, "the newest release's commit, not an older one's")

	// A release that does not say its commit is an error, not "no release":
	// the API check would otherwise compare with nothing.
	cl, err = release.ParseChangelog([]byte("## [Unreleased]\n## [0.2.0] - 2026-02-01\n- b\n## [0.1.0] - 2026-01-01\nReleased from commit " + sha + "\n"))
	require.NoError(t, err)
	_, _, _, err = cl.LastRelease()
	require.ErrorContains(t, err, "does not say which commit")
	// A commit of another length is not one.
	cl, err = release.ParseChangelog([]byte("## [Unreleased]\n## [0.2.0] - 2026-02-01\nReleased from commit " + sha[:12] + "\n"))
	require.NoError(t, err)
	_, _, _, err = cl.LastRelease()
	require.ErrorContains(t, err, "does not say which commit")
}

func TestChangelogCutAndRecord(t *testing.T) {
	text := "# C\n\n## [Unreleased]\n\n### Added\n- x\n\n## [0.1.0] - 2026-01-01\n\nReleased from commit " + sha + ".\n"
	cl, err := release.ParseChangelog([]byte(text))
	require.NoError(t, err)
	for _, bad := range []string{"0.2.0", "v0.2", "v0.2.0+meta", "v0.1.0", "v0.0.9", "latest", ""} {
		_, err := cl.Cut(bad, "2026-12-01")
		assert.Error(t, err, "%q", bad)
	}
	cut, err := cl.Cut("v0.2.0", "2026-12-01")
	require.NoError(t, err)
	assert.Equal(t, "# C\n\n## [Unreleased]\n\n## [0.2.0] - 2026-12-01\n\n### Added\n- x\n\n## [0.1.0] - 2026-01-01\n\nReleased from commit "+sha+".\n", string(cut))

	cl, err = release.ParseChangelog(cut)
	require.NoError(t, err)
	_, err = cl.Cut("v0.3.0", "2026-12-02")
	require.ErrorContains(t, err, "Unreleased section is empty")
	_, _, _, err = cl.LastRelease()
	require.ErrorContains(t, err, "does not say which commit", "cut, not yet recorded")
	_, err = cl.Record("v0.1.0", sha, nil)
	require.ErrorContains(t, err, "not the newest release")
	_, err = cl.Record("v0.2.0", "HEAD", nil)
	require.ErrorContains(t, err, "not a commit")
	rec, err := cl.Record("v0.2.0", strings.Repeat("a", 40), []string{"v0.2.0", "sink/apply/v0.2.0"})
	require.NoError(t, err)
	cl, err = release.ParseChangelog(rec)
	require.NoError(t, err)
	v, commit, ok, err := cl.LastRelease()
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, "v0.2.0", v)
	assert.Equal(t, strings.Repeat("a", 40), commit)
	assert.Contains(t, string(rec), "(tags v0.2.0, sink/apply/v0.2.0)")
}

func FuzzParseChangelog(f *testing.F) {
	f.Add("## [Unreleased]\n\n## [0.1.0] - 2026-01-01\n\nReleased from commit " + sha + "\n")
	f.Add("## [Unreleased]\n## [1.0.0-rc.1] - 2026-01-01\n")
	f.Fuzz(func(t *testing.T, text string) {
		cl, err := release.ParseChangelog([]byte(text))
		if err != nil {
			return
		}
		_ = cl.Unreleased()
		if v, commit, ok, err := cl.LastRelease(); ok && (err != nil || len(commit) != 40 || !strings.HasPrefix(v, "v")) {
			t.Fatalf("LastRelease of %q: %q %q %v", text, v, commit, err)
		}
		if out, err := cl.Cut("v99.0.0", "2026-12-01"); err == nil {
			if _, err := release.ParseChangelog(out); err != nil {
				t.Fatalf("Cut made what Parse refuses: %v\n%q", err, out)
			}
		}
	})
}
