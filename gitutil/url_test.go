package gitutil

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNormalizeURL(t *testing.T) {
	same := []string{
		"https://Example.com/group/repo",
		"https://example.com/group/repo.git",
		"https://example.com:443/group/repo.git/",
		"https://user:secret@example.com/group/repo",
		"ssh://git@example.com:22/group/repo.git",
		"git@example.com:group/repo.git",
		"example.com:group/repo",
		"http://example.com:80/group/repo",
	}
	for _, u := range same {
		t.Run(u, func(t *testing.T) {
			got, err := NormalizeURL(u)
			require.NoError(t, err)
			assert.Equal(t, "example.com/group/repo", got)
		})
	}
	for _, tc := range []struct{ in, want string }{
		{"https://example.com:8443/r.git", "example.com:8443/r"},
		{"ssh://git@example.com:2222/r.git", "example.com:2222/r"},
		{"file:///srv/git/r.git", "file:///srv/git/r"},
		{"https://[::1]:8080/r", "[::1]:8080/r"},
		{"https://[::1]/r", "[::1]/r"},
	} {
		got, err := NormalizeURL(tc.in)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
}

func TestParseURLRejects(t *testing.T) {
	for _, bad := range []string{
		"", "   ", "ftp://example.com/r", "https://", "https://example.com", "https://example.com/",
		"just-a-word", "https://exa mple.com/r", "https://example.com/r\n", "file://remote-host/r",
		"https://user:s3cret@exa mple.com/r",
	} {
		t.Run(bad, func(t *testing.T) {
			_, err := ParseURL(bad)
			require.ErrorIs(t, err, ErrInvalidURL)
			assert.NotContains(t, err.Error(), "s3cret")
		})
	}
}

func TestRedactURL(t *testing.T) {
	assert.Equal(t, "https://user:redacted@example.com/r", RedactURL("https://user:s3cret@example.com/r"))
	assert.Equal(t, "https://example.com/r", RedactURL("https://example.com/r"))
	assert.Equal(t, "git@example.com:r", RedactURL("git@example.com:r"))
	assert.NotContains(t, RedactURL("https://user:s3cret@exa mple.com/r"), "s3cret")
	assert.NotContains(t, RedactURL("https://tok:s3c%zzret@host/r"), "s3c")
}

func TestStripCredentials(t *testing.T) {
	assert.Equal(t, "https://example.com/r", StripCredentials("https://user:s3cret@example.com/r"))
	assert.Equal(t, "ssh://example.com/r", StripCredentials("ssh://git@example.com/r"))
	assert.Equal(t, "git@example.com:r", StripCredentials("git@example.com:r"))
}

func FuzzNormalizeURL(f *testing.F) {
	for _, s := range []string{
		"https://example.com/g/r.git", "git@example.com:g/r", "ssh://git@h:22/r", "file:///x",
		"https://u:p@h/r", "http://[::1]:80/r", "h:/", "@:x", "https://h/%zz",
	} {
		f.Add(s)
	}
	f.Add("https://user:secretpw@h/r")
	f.Fuzz(func(t *testing.T, raw string) {
		key, err := NormalizeURL(raw)
		if err != nil {
			if !errors.Is(err, ErrInvalidURL) {
				t.Fatalf("error does not wrap ErrInvalidURL: %v", err)
			}
			if strings.Contains(err.Error(), "secretpw") && !strings.Contains(RedactURL(raw), "secretpw") {
				t.Fatalf("error leaks the password: %v", err)
			}
			return
		}
		if key == "" || strings.ContainsFunc(key, func(r rune) bool { return r < 0x20 }) {
			t.Fatalf("bad key %q for %q", key, raw)
		}
		if u, err := url.Parse(raw); err == nil && u.User != nil {
			if pw, ok := u.User.Password(); ok && pw != "" && strings.Contains(key, ":"+pw+"@") {
				t.Fatalf("key keeps credentials: %q", key)
			}
		}
		// Normalising is idempotent through the https form, where the key
		// holds no characters that mean something else in a URL.
		if !strings.HasPrefix(key, "file://") && !strings.ContainsAny(key, "#?%@ ") {
			again, err := NormalizeURL("https://" + key)
			if err == nil && again != key {
				t.Fatalf("not idempotent: %q -> %q -> %q", raw, key, again)
			}
		}
	})
}
