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
		// What git would run or read as an option.
		"ext::sh -c touch% /tmp/pwned", "ext::x", "fd::17", "-oProxyCommand=x", "ssh://-oProxyCommand=x/r",
		"git@-oProxyCommand=x:r", "ssh://git@host/-u", "git@host:-u", "https://-host/r",
		// Queries, fragments and ambiguous user information.
		"https://host/r.git?token=s3cret", "https://host/r.git#s3cret", "git@host:r?token=s3cret",
		"https://tok/s3cret@host/r", "https://user:pa/s3cret@host/r", "https://user:pa?s3cret@host/r",
		"ssh://git:s3cret@host/r", "file://user@/srv/r",
	} {
		t.Run(bad, func(t *testing.T) {
			_, err := ParseURL(bad)
			require.ErrorIs(t, err, ErrInvalidURL)
			assert.NotContains(t, err.Error(), "s3cret")
		})
	}
}

func TestRedactURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"https://user:s3cret@example.com/r", "https://redacted@example.com/r"},
		{"https://s3cret@example.com/r", "https://redacted@example.com/r"},
		{"https://user:pa/s3cret@example.com/r", "https://redacted@example.com/r"},
		{"https://user:pa?s3cret@example.com/r", "https://redacted@example.com/r"},
		{"https://user:pa#s3cret@example.com/r", "https://redacted@example.com/r"},
		{"https://user:pa@s3cret@example.com/r", "https://redacted@example.com/r"},
		{"https://tok:s3c%zzret@host/r", "https://redacted@host/r"},
		{"https://example.com/r?token=s3cret&x", "https://example.com/r?token=redacted&x"},
		{"https://example.com/r#s3cret", "https://example.com/r"},
		{"https://example.com/r", "https://example.com/r"},
		{"ssh://git@example.com/r", "ssh://git@example.com/r"},
		{"ssh://git:s3cret@example.com/r", "ssh://redacted@example.com/r"},
		{"git@example.com:r", "git@example.com:r"},
		{"us:s3cret@example.com:r", "redacted@example.com:r"},
		{"https://user:s3cret@exa mple.com/r", "https://redacted@exa mple.com/r"},
	} {
		assert.Equal(t, tc.want, RedactURL(tc.in), tc.in)
	}
}

func TestSplitCredentials(t *testing.T) {
	for _, tc := range []struct {
		in, bare string
		auth     *Auth
	}{
		{"https://user:s3cret@example.com/r.git", "https://example.com/r.git", &Auth{Username: "user", Password: "s3cret"}},
		{"https://s3cret@example.com/r", "https://example.com/r", &Auth{Username: "s3cret"}},
		{"https://user:p%2Fs3cret%40@example.com/r", "https://example.com/r", &Auth{Username: "user", Password: "p/s3cret@"}},
		{"https://example.com/r", "https://example.com/r", nil},
		{"ssh://git@example.com/r", "ssh://git@example.com/r", nil},
		{"git@example.com:r", "git@example.com:r", nil},
	} {
		bare, auth, err := splitCredentials(tc.in)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.bare, bare, tc.in)
		assert.Equal(t, tc.auth, auth, tc.in)
		assert.Equal(t, tc.bare, StripCredentials(tc.in))
	}
	_, _, err := splitCredentials("https://user:pa/s3cret@example.com/r")
	require.ErrorIs(t, err, ErrInvalidURL)
	assert.NotContains(t, err.Error(), "s3cret")
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
		if strings.Contains(RedactURL(raw), "secretpw") {
			t.Fatalf("redaction keeps the password: %q", RedactURL(raw))
		}
		if bare, _, err := splitCredentials(raw); err == nil && strings.Contains(bare, "secretpw") {
			t.Fatalf("bare URL keeps the password: %q", bare)
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

func TestMergeURLCredentials(t *testing.T) {
	base := &Auth{CABundle: []byte("ca"), ID: "secret:ns/creds"}
	bare, auth, err := MergeURLCredentials("https://user:s3cret@example.com/r", base)
	require.NoError(t, err)
	assert.Equal(t, "https://example.com/r", bare)
	assert.Equal(t, &Auth{Username: "user", Password: "s3cret", CABundle: []byte("ca"), ID: "secret:ns/creds"}, auth)
	assert.Empty(t, base.Password, "base is not changed")

	bare, auth, err = MergeURLCredentials("https://example.com/r", base)
	require.NoError(t, err)
	assert.Equal(t, "https://example.com/r", bare)
	assert.Same(t, base, auth)

	_, _, err = MergeURLCredentials("https://user:s3cret@example.com/r", &Auth{BearerToken: "other"})
	require.ErrorIs(t, err, ErrCredentialsTwice)
	_, _, err = MergeURLCredentials("http://user:s3cret@example.com/r", nil)
	require.ErrorIs(t, err, ErrInsecureCredentials)
	assert.NotContains(t, err.Error(), "s3cret")
	_, auth, err = MergeURLCredentials("http://s3cret@example.com/r", &Auth{AllowInsecureHTTP: true})
	require.NoError(t, err)
	assert.Equal(t, "s3cret", auth.Username)
}
