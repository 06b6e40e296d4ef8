package gitutil

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
)

// ErrInvalidURL is returned (wrapped) for a repository URL that cannot be
// parsed or uses a scheme the watcher does not speak.
var ErrInvalidURL = errors.New("gitutil: invalid repository URL")

// scpLike matches the scp-like SSH form "user@host:path", as git accepts it.
var scpLike = regexp.MustCompile(`^(?:([^@/:]+)@)?([^@/:\[\]]+|\[[^\]]+\]):([^/].*|/.*)$`)

var defaultPorts = map[string]string{"https": "443", "http": "80", "ssh": "22", "git": "9418"}

// Endpoint is a parsed repository URL.
type Endpoint struct {
	// Scheme is one of https, http, ssh, git or file. The scp-like form
	// "git@host:path" has scheme ssh.
	Scheme string
	// User is the user name in the URL, if any (for SSH usually "git").
	User string
	// Host is the lower-cased host, with a non-default port as "host:port".
	Host string
	// Path is the repository path without a leading slash or ".git" suffix.
	Path string
}

// Key is the name of the remote that does not depend on how the URL was
// written: "host[:port]/path", or "file:///path" for local repositories. Two
// URLs with the same Key name the same repository, whatever their scheme,
// user, case of host, default port or ".git" suffix.
func (e Endpoint) Key() string {
	if e.Scheme == "file" {
		return "file:///" + e.Path
	}
	return e.Host + "/" + e.Path
}

// ParseURL parses a repository URL in any form git accepts for a remote:
// https://, http://, ssh://, git://, file:// and the scp-like
// "user@host:path". Credentials in the URL are dropped from the result (see
// [MergeURLCredentials] to keep them as an [Auth]). It refuses what git would
// read as something other than a remote: a host or path starting with "-"
// (an option to ssh or git), "transport::address" forms (ext::, fd::), and
// a query or fragment (git ignores neither safely; a token in a query
// string belongs in an Auth).
func ParseURL(raw string) (Endpoint, error) {
	raw, err := screenURL(raw)
	if err != nil {
		return Endpoint{}, err
	}
	if !strings.Contains(raw, "://") {
		m := scpLike.FindStringSubmatch(raw)
		if m == nil {
			return Endpoint{}, fmt.Errorf("%w: %q has no scheme and is not user@host:path", ErrInvalidURL, RedactURL(raw))
		}
		if strings.ContainsAny(raw, "?#") {
			return Endpoint{}, fmt.Errorf("%w: %q has a query or fragment", ErrInvalidURL, RedactURL(raw))
		}
		return finish(Endpoint{Scheme: "ssh", User: m[1], Host: strings.ToLower(m[2])}, m[3], raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return Endpoint{}, fmt.Errorf("%w: %q cannot be parsed", ErrInvalidURL, RedactURL(raw))
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(raw, "#") {
		return Endpoint{}, fmt.Errorf("%w: %q has a query or fragment (credentials belong in an Auth)", ErrInvalidURL, RedactURL(raw))
	}
	if u.Opaque != "" || strings.Contains(u.Path, "@") {
		// "https://tok/en@host/r": a password or token with an unescaped
		// "/", "?" or "#" that url.Parse reads as a path. Refused rather
		// than guessed, since the guess would send the secret as a host.
		return Endpoint{}, fmt.Errorf("%w: %q is ambiguous: percent-encode \"/\", \"?\", \"#\" and \"@\" in credentials", ErrInvalidURL, RedactURL(raw))
	}
	e := Endpoint{Scheme: strings.ToLower(u.Scheme)}
	switch e.Scheme {
	case "https", "http", "ssh", "git":
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return Endpoint{}, fmt.Errorf("%w: %q: file URLs cannot name a host", ErrInvalidURL, RedactURL(raw))
		}
		if u.User != nil {
			return Endpoint{}, fmt.Errorf("%w: %q: file URLs take no user", ErrInvalidURL, RedactURL(raw))
		}
		return finish(e, u.Path, raw)
	default:
		return Endpoint{}, fmt.Errorf("%w: %q: unsupported scheme %q", ErrInvalidURL, RedactURL(raw), u.Scheme)
	}
	if e, err = withUserAndHost(e, u, raw); err != nil {
		return Endpoint{}, err
	}
	return finish(e, u.Path, raw)
}

// screenURL refuses, before any parsing, what no remote may be: control
// characters, white space, a leading "-" and "transport::" forms. It
// returns raw trimmed.
func screenURL(raw string) (string, error) {
	if strings.ContainsFunc(raw, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return "", fmt.Errorf("%w: %q contains control characters", ErrInvalidURL, RedactURL(raw))
	}
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return "", fmt.Errorf("%w: empty", ErrInvalidURL)
	}
	if strings.ContainsAny(raw, " ") {
		return "", fmt.Errorf("%w: %q contains white space or control characters", ErrInvalidURL, RedactURL(raw))
	}
	if strings.HasPrefix(raw, "-") {
		return "", fmt.Errorf("%w: %q starts with \"-\"", ErrInvalidURL, RedactURL(raw))
	}
	if transportPrefix.MatchString(raw) {
		return "", fmt.Errorf("%w: %q: \"transport::\" remotes are refused", ErrInvalidURL, RedactURL(raw))
	}
	return raw, nil
}

// withUserAndHost sets e's user and host from a network URL u: a password
// only over HTTP(S), the host lower-cased and without the trailing dot of
// a fully qualified name ("github.com." is github.com), its port kept
// unless the scheme's default.
func withUserAndHost(e Endpoint, u *url.URL, raw string) (Endpoint, error) {
	if u.User != nil {
		e.User = u.User.Username()
		if _, has := u.User.Password(); has && e.Scheme != "https" && e.Scheme != "http" {
			return Endpoint{}, fmt.Errorf("%w: %q: %s URLs take no password", ErrInvalidURL, RedactURL(raw), e.Scheme)
		}
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if host == "" {
		return Endpoint{}, fmt.Errorf("%w: %q has no host", ErrInvalidURL, RedactURL(raw))
	}
	if port := u.Port(); port != "" && port != defaultPorts[e.Scheme] {
		host = net.JoinHostPort(host, port)
	} else if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	e.Host = host
	return e, nil
}

// transportPrefix matches git's "<transport>::<address>" remote form
// (ext::, fd::, and remote helpers), which runs programs.
var transportPrefix = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*::`)

func finish(e Endpoint, path, raw string) (Endpoint, error) {
	path = strings.Trim(path, "/")
	path = strings.TrimSuffix(path, ".git")
	path = strings.TrimRight(path, "/")
	if path == "" {
		return Endpoint{}, fmt.Errorf("%w: %q has no repository path", ErrInvalidURL, RedactURL(raw))
	}
	if strings.HasPrefix(strings.TrimLeft(e.Host, "["), "-") || strings.HasPrefix(path, "-") {
		// ssh and git would read it as an option.
		return Endpoint{}, fmt.Errorf("%w: %q: a host or path starting with \"-\" is refused", ErrInvalidURL, RedactURL(raw))
	}
	e.Path = path
	return e, nil
}

// NormalizeURL returns the [Endpoint.Key] of a repository URL: the one name
// of a remote that the scheduler keys its pollers by and that push hints are
// matched against.
func NormalizeURL(raw string) (string, error) {
	e, err := ParseURL(raw)
	if err != nil {
		return "", err
	}
	return e.Key(), nil
}

// RedactURL returns raw fit to print: the user information of a URL with a
// scheme is replaced by "redacted" (a user name alone may be a token), query
// values are replaced by "redacted" and a fragment is dropped. Only the
// plain user name of an ssh:// or scp-like URL ("git@host:r") is kept,
// since an SSH login is not a secret. It never parses more than it must:
// for a URL with a scheme, everything between "://" and the last "@" is
// user information, whatever characters it holds, so a password with an
// unescaped "/", "?" or "#" is redacted too. Use it on every URL that
// reaches a log line, an error, an event, a metric or a status.
func RedactURL(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		// scp-like: "user@host:path" keeps a plain user name.
		user, after, found := strings.Cut(raw, "@")
		if found && strings.ContainsAny(user, ":/?#") {
			return "redacted@" + redactQuery(after)
		}
		return redactQuery(raw)
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		user := rest[:at]
		keep := strings.EqualFold(scheme, "ssh") && user != "" && !strings.ContainsAny(user, ":/?#%")
		if !keep {
			user = "redacted"
		}
		rest = user + "@" + rest[at+1:]
	}
	return scheme + "://" + redactQuery(rest)
}

// redactQuery replaces every query value with "redacted" and drops a
// fragment.
func redactQuery(s string) string {
	s, _, _ = strings.Cut(s, "#")
	base, query, ok := strings.Cut(s, "?")
	if !ok {
		return s
	}
	var b strings.Builder
	b.WriteString(base)
	b.WriteByte('?')
	for i, kv := range strings.Split(query, "&") {
		if i > 0 {
			b.WriteByte('&')
		}
		k, _, hasValue := strings.Cut(kv, "=")
		b.WriteString(k)
		if hasValue {
			b.WriteString("=redacted")
		}
	}
	return b.String()
}

// splitCredentials takes the user information out of a repository URL:
// bare is the URL without it (what may be stored, printed and compared),
// and auth carries its user name and password as basic credentials, or is
// nil when the URL has none. A user name alone (a token, as in
// "https://TOKEN@host/r") becomes the Username with an empty Password, which
// is how git sends it. The user of an ssh:// or scp-like URL is a login,
// not a secret: it stays in bare and auth is nil. raw must be valid
// ([ParseURL]).
func splitCredentials(raw string) (bare string, auth *Auth, err error) {
	e, err := ParseURL(raw)
	if err != nil {
		return "", nil, err
	}
	raw = strings.TrimSpace(raw)
	if e.Scheme == "ssh" || e.Scheme == "file" || !strings.Contains(raw, "@") {
		return raw, nil, nil
	}
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return "", nil, fmt.Errorf("%w: %q cannot be parsed", ErrInvalidURL, RedactURL(raw))
	}
	pw, _ := u.User.Password()
	auth = &Auth{Username: u.User.Username(), Password: pw}
	u.User = nil
	return u.String(), auth, nil
}

// StripCredentials returns raw without any secret: a valid URL without its
// user information, else [RedactURL]'s form.
func StripCredentials(raw string) string {
	if bare, _, err := splitCredentials(raw); err == nil {
		return bare
	}
	return RedactURL(raw)
}

// ParseBareURL is [ParseURL] for the URLs that reach the network and the
// disk: they carry no credentials, which come as an [Auth] (see
// [MergeURLCredentials]), so that no secret is stored in a mirror's
// configuration, passed on a command line or printed.
func ParseBareURL(raw string) (Endpoint, error) {
	_, auth, err := splitCredentials(raw)
	if err != nil {
		return Endpoint{}, err
	}
	if auth != nil {
		return Endpoint{}, fmt.Errorf("%w: %q carries credentials: pass them as an Auth (see MergeURLCredentials)", ErrInvalidURL, RedactURL(raw))
	}
	return ParseURL(raw)
}

// ErrCredentialsTwice is returned (wrapped) by [MergeURLCredentials] for a
// URL with user information whose Auth carries credentials too.
var ErrCredentialsTwice = errors.New("gitutil: credentials both in the URL and in the Auth")

// MergeURLCredentials is where credentials in a URL stop travelling with
// it: bare is raw without user information, and auth is base (nil: anonymous)
// with the URL's user name and password as basic credentials — a copy, so
// base keeps its TLS settings and AllowInsecureHTTP and is not changed.
// Without user information in raw, auth is base. A base with credentials of
// its own and a URL with user information is [ErrCredentialsTwice]; the
// URL's credentials over plain http:// are [ErrInsecureCredentials] unless
// base allows insecure HTTP, as any credentials are.
func MergeURLCredentials(raw string, base *Auth) (bare string, auth *Auth, err error) {
	bare, fromURL, err := splitCredentials(raw)
	if err != nil || fromURL == nil {
		return bare, base, err
	}
	if base.hasSecret() {
		return "", nil, fmt.Errorf("%w: %s", ErrCredentialsTwice, RedactURL(raw))
	}
	merged := Auth{}
	if base != nil {
		merged = *base
	}
	merged.Username, merged.Password = fromURL.Username, fromURL.Password
	if e, _ := ParseURL(bare); e.Scheme == "http" && !merged.AllowInsecureHTTP {
		return "", nil, fmt.Errorf("%w: %s", ErrInsecureCredentials, RedactURL(raw))
	}
	return bare, &merged, nil
}
