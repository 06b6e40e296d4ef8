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
// "user@host:path". Credentials in the URL are dropped from the result.
func ParseURL(raw string) (Endpoint, error) {
	if strings.ContainsFunc(raw, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return Endpoint{}, fmt.Errorf("%w: %q contains control characters", ErrInvalidURL, RedactURL(raw))
	}
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return Endpoint{}, fmt.Errorf("%w: empty", ErrInvalidURL)
	}
	if strings.ContainsAny(raw, " ") {
		return Endpoint{}, fmt.Errorf("%w: %q contains white space or control characters", ErrInvalidURL, RedactURL(raw))
	}
	if !strings.Contains(raw, "://") {
		m := scpLike.FindStringSubmatch(raw)
		if m == nil {
			return Endpoint{}, fmt.Errorf("%w: %q has no scheme and is not user@host:path", ErrInvalidURL, RedactURL(raw))
		}
		return finish(Endpoint{Scheme: "ssh", User: m[1], Host: strings.ToLower(m[2])}, m[3], raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return Endpoint{}, fmt.Errorf("%w: %q cannot be parsed", ErrInvalidURL, RedactURL(raw))
	}
	e := Endpoint{Scheme: strings.ToLower(u.Scheme)}
	switch e.Scheme {
	case "https", "http", "ssh", "git":
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return Endpoint{}, fmt.Errorf("%w: %q: file URLs cannot name a host", ErrInvalidURL, RedactURL(raw))
		}
		return finish(e, u.Path, raw)
	default:
		return Endpoint{}, fmt.Errorf("%w: %q: unsupported scheme %q", ErrInvalidURL, RedactURL(raw), u.Scheme)
	}
	if u.User != nil {
		e.User = u.User.Username()
	}
	host := strings.ToLower(u.Hostname())
	if host == "" {
		return Endpoint{}, fmt.Errorf("%w: %q has no host", ErrInvalidURL, RedactURL(raw))
	}
	if port := u.Port(); port != "" && port != defaultPorts[e.Scheme] {
		host = net.JoinHostPort(host, port)
	} else if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	e.Host = host
	return finish(e, u.Path, raw)
}

func finish(e Endpoint, path, raw string) (Endpoint, error) {
	path = strings.Trim(path, "/")
	path = strings.TrimSuffix(path, ".git")
	path = strings.TrimRight(path, "/")
	if path == "" {
		return Endpoint{}, fmt.Errorf("%w: %q has no repository path", ErrInvalidURL, RedactURL(raw))
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

// RedactURL returns raw with any password or token in its user information
// replaced by "redacted". Use it on every URL that reaches a log line or an
// error. A string that does not parse as a URL is returned with everything
// between "://" and the last "@" before the host removed.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err == nil && u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "redacted")
			return u.String()
		}
		return raw
	}
	if err == nil {
		return raw
	}
	// Unparseable: drop anything that looks like userinfo.
	if i := strings.Index(raw, "://"); i >= 0 {
		rest := raw[i+3:]
		end := strings.IndexAny(rest, "/?#")
		if end < 0 {
			end = len(rest)
		}
		if at := strings.LastIndex(rest[:end], "@"); at >= 0 {
			return raw[:i+3] + "redacted@" + rest[at+1:]
		}
	}
	return raw
}

// StripCredentials returns raw without any user information when it is a
// URL with a scheme ("https://user:token@host/r" becomes "https://host/r");
// scp-like and unparseable strings are returned redacted (see RedactURL).
func StripCredentials(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Scheme != "" && u.Host != "" {
		u.User = nil
		return u.String()
	}
	return RedactURL(raw)
}
