package gitutil

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// ErrInsecureCredentials is returned when credentials would be sent over
// plain http:// and the caller did not set [Auth.AllowInsecureHTTP].
var ErrInsecureCredentials = errors.New("gitutil: credentials refused over plain http")

// ErrInvalidAuth is returned (wrapped) for credentials that cannot be used:
// a malformed key, missing known_hosts, credentials of the wrong kind for
// the URL's scheme.
var ErrInvalidAuth = errors.New("gitutil: invalid credentials")

// Auth is how to authenticate to one remote. The zero value is anonymous
// access. Its fields are secrets: Auth never formats them, and errors about
// them name the field, never the value.
type Auth struct {
	// ID names the credential, not its value: a stable identity such as
	// "secret:<namespace>/<name>" that a [CredentialResolver] sets. Remotes
	// and mirrors are keyed by who reads them ([Auth.Identity]); with an ID,
	// a rotated password or key for the same credential and user keeps its
	// mirror. Without one, the identity is a digest of the secrets, so a
	// rotation starts a new mirror. Two Auths with the same ID must be the
	// same credential: never let a tenant choose another tenant's ID.
	ID string

	// Username and Password are HTTP basic credentials. For SSH, Username is
	// the login user (default: the user in the URL, then "git").
	Username string
	Password string
	// BearerToken is sent as "Authorization: Bearer" over HTTP.
	BearerToken string

	// SSHPrivateKey is a PEM private key; SSHPassphrase decrypts it.
	SSHPrivateKey []byte
	SSHPassphrase string
	// SSHPrivateKeys are more PEM private keys, offered after SSHPrivateKey
	// in turn, as ssh offers each of its -i (git-sync's repeatable
	// --ssh-key-file); SSHPassphrase decrypts each.
	SSHPrivateKeys [][]byte
	// KnownHosts is a known_hosts file's content. SSH refuses to connect
	// without it unless InsecureIgnoreHostKey is set.
	KnownHosts []byte
	// InsecureIgnoreHostKey accepts any SSH host key. Only for tests.
	InsecureIgnoreHostKey bool

	// CABundle is PEM certificates trusted for HTTPS on top of the system
	// pool.
	CABundle []byte
	// InsecureSkipTLSVerify disables HTTPS certificate verification.
	InsecureSkipTLSVerify bool
	// AllowInsecureHTTP lets credentials travel over plain http://. Without
	// it, credentials and an http:// URL are refused.
	AllowInsecureHTTP bool

	// Proxy, when set, is the proxy an HTTP(S) remote is reached through
	// (Flux's proxySecretRef), instead of the environment's
	// HTTPS_PROXY/HTTP_PROXY. SSH remotes refuse it.
	Proxy *Proxy
}

// Proxy is an HTTP(S) or SOCKS5 proxy and its credentials.
type Proxy struct {
	// URL is "http://host:port", "https://host:port" or
	// "socks5://host:port", without credentials.
	URL string
	// Username and Password, when set, authenticate to the proxy.
	Username string
	Password string
}

// options checks the proxy and returns go-git's form of it.
func (p *Proxy) options() (transport.ProxyOptions, error) {
	if p == nil {
		return transport.ProxyOptions{}, nil
	}
	u, err := url.Parse(p.URL)
	if err != nil || u.Host == "" || strings.ContainsAny(p.URL, " \t\r\n") {
		return transport.ProxyOptions{}, fmt.Errorf("%w: proxy URL %q is not scheme://host:port", ErrInvalidAuth, RedactURL(p.URL))
	}
	switch {
	case u.User != nil:
		return transport.ProxyOptions{}, fmt.Errorf("%w: the proxy URL carries credentials: give them as the proxy's username and password", ErrInvalidAuth)
	case u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "socks5":
		return transport.ProxyOptions{}, fmt.Errorf("%w: proxy scheme %q is not http, https or socks5", ErrInvalidAuth, u.Scheme)
	case u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.Fragment != "":
		return transport.ProxyOptions{}, fmt.Errorf("%w: proxy URL %q has more than scheme://host:port", ErrInvalidAuth, RedactURL(p.URL))
	}
	return transport.ProxyOptions{URL: u.Scheme + "://" + u.Host, Username: p.Username, Password: p.Password}, nil
}

// String never shows a secret.
func (a *Auth) String() string {
	if a == nil {
		return "anonymous"
	}
	var kinds []string
	if a.Username != "" || a.Password != "" {
		kinds = append(kinds, "basic")
	}
	if a.BearerToken != "" {
		kinds = append(kinds, "bearer")
	}
	if a.hasSSHKey() {
		kinds = append(kinds, "ssh-key")
	}
	if len(kinds) == 0 {
		return "anonymous"
	}
	return strings.Join(kinds, "+")
}

// hasSecret reports whether a carries anything that authenticates.
func (a *Auth) hasSecret() bool {
	return a != nil && (a.Username != "" || a.Password != "" || a.BearerToken != "" || a.hasSSHKey())
}

// hasSSHKey reports whether a holds an SSH private key.
func (a *Auth) hasSSHKey() bool { return len(a.SSHKeys()) > 0 }

// SSHKeys are a's SSH private keys, in the order they are offered:
// SSHPrivateKey, then SSHPrivateKeys, the empty ones left out.
func (a *Auth) SSHKeys() [][]byte {
	var keys [][]byte
	for _, k := range append([][]byte{a.SSHPrivateKey}, a.SSHPrivateKeys...) {
		if len(k) > 0 {
			keys = append(keys, k)
		}
	}
	return keys
}

// Identity is a short, stable digest of who a names to the remote and how
// the remote is reached: two Auths with the same Identity may share one
// poller and one mirror, two with different ones never do. With an [Auth.ID]
// it digests the ID, the user and the connection settings (not the
// password or key, so rotations keep the identity); without one, every
// field. The digest reveals nothing of the secrets. Anonymous access with
// default settings is "anonymous".
func (a *Auth) Identity() string {
	if a == nil || (!a.hasSecret() && len(a.CABundle) == 0 && len(a.KnownHosts) == 0 &&
		!a.InsecureSkipTLSVerify && !a.InsecureIgnoreHostKey && a.ID == "" && a.Proxy == nil) {
		return "anonymous"
	}
	parts := [][]byte{[]byte(a.ID), []byte(a.Username), a.KnownHosts, a.CABundle,
		[]byte(fmt.Sprint(a.InsecureIgnoreHostKey, a.InsecureSkipTLSVerify, a.AllowInsecureHTTP))}
	if a.Proxy != nil {
		// Who reaches the remote, and how: one target's proxy (and its
		// credentials) never carries another's traffic.
		parts = append(parts, []byte("proxy"), []byte(a.Proxy.URL), []byte(a.Proxy.Username))
	}
	prefix := "id-"
	if a.ID == "" {
		prefix = ""
		parts = append(parts, []byte(a.Password), []byte(a.BearerToken), a.SSHPrivateKey, []byte(a.SSHPassphrase))
		parts = append(parts, a.SSHPrivateKeys...)
		if a.Proxy != nil {
			parts = append(parts, []byte(a.Proxy.Password))
		}
	}
	h := sha256.New()
	for _, part := range parts {
		fmt.Fprintf(h, "%d:", len(part))
		h.Write(part)
	}
	return prefix + hex.EncodeToString(h.Sum(nil))[:16]
}

// Transport is how go-git reaches one remote with an [Auth], as
// [Auth.Transport] checked and built it: for implementations over go-git
// (gitutil/mirror); others read the Auth.
type Transport struct {
	// Auth is the Auth it was made from (a zero Auth for nil).
	Auth *Auth
	// Method is go-git's authentication; nil for none.
	Method transport.AuthMethod
	// CABundle, InsecureSkipTLS and Proxy are go-git's connection
	// settings: the Auth's, the proxy checked.
	CABundle        []byte
	InsecureSkipTLS bool
	Proxy           transport.ProxyOptions
}

// Transport checks a against the URL's scheme and builds go-git's
// authentication and connection settings for it.
func (a *Auth) Transport(e Endpoint) (Transport, error) {
	if a == nil {
		a = &Auth{}
	}
	t := Transport{Auth: a, CABundle: a.CABundle, InsecureSkipTLS: a.InsecureSkipTLSVerify}
	proxy, err := a.Proxy.options()
	if err != nil {
		return t, err
	}
	if a.Proxy != nil && e.Scheme != "http" && e.Scheme != "https" {
		return t, fmt.Errorf("%w: a proxy is used for http and https URLs only, not %s", ErrInvalidAuth, e.Scheme)
	}
	t.Proxy = proxy
	switch e.Scheme {
	case "http", "https":
		t.Method, err = a.httpAuth(e.Scheme)
	case "ssh":
		t.Method, err = a.sshAuth(e)
	case "git", "file":
		if a.hasSecret() {
			err = fmt.Errorf("%w: %s URLs take no credentials", ErrInvalidAuth, e.Scheme)
		}
	}
	return t, err
}

// httpAuth is go-git's auth for an HTTP(S) URL: a bearer token, or basic
// credentials; never a secret over plain http unless allowed.
func (a *Auth) httpAuth(scheme string) (transport.AuthMethod, error) {
	if a.hasSSHKey() {
		return nil, fmt.Errorf("%w: an SSH key cannot be used with an %s URL", ErrInvalidAuth, scheme)
	}
	if scheme == "http" && a.hasSecret() && !a.AllowInsecureHTTP {
		return nil, ErrInsecureCredentials
	}
	switch {
	case a.BearerToken != "":
		return &githttp.TokenAuth{Token: a.BearerToken}, nil
	case a.Username != "" || a.Password != "":
		user := a.Username
		if user == "" {
			// Tokens used as passwords still need a non-empty user.
			user = "git"
		}
		return &githttp.BasicAuth{Username: user, Password: a.Password}, nil
	}
	return nil, nil
}

// sshAuth is go-git's auth for an ssh URL: the private key, as the Auth's
// user, the URL's or "git", with the host key checked.
func (a *Auth) sshAuth(e Endpoint) (transport.AuthMethod, error) {
	user := a.Username
	if user == "" {
		user = e.User
	}
	if user == "" {
		user = "git"
	}
	cb, err := a.hostKeyCallback()
	if err != nil {
		return nil, err
	}
	keys := a.SSHKeys()
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: an ssh URL needs an SSH private key", ErrInvalidAuth)
	}
	var signers []ssh.Signer
	for i, key := range keys {
		pk, err := gitssh.NewPublicKeys(user, key, a.SSHPassphrase)
		if err != nil {
			// The ssh package's message never contains key material.
			return nil, fmt.Errorf("%w: SSH private key %d: %v", ErrInvalidAuth, i+1, err)
		}
		if len(keys) == 1 {
			pk.HostKeyCallback = cb
			return pk, nil
		}
		signers = append(signers, pk.Signer)
	}
	return &gitssh.PublicKeysCallback{User: user, Callback: func() ([]ssh.Signer, error) { return signers, nil },
		HostKeyCallbackHelper: gitssh.HostKeyCallbackHelper{HostKeyCallback: cb}}, nil
}

func (a *Auth) hostKeyCallback() (ssh.HostKeyCallback, error) {
	if a.InsecureIgnoreHostKey {
		return ssh.InsecureIgnoreHostKey(), nil //nolint:gosec // opted out by the caller
	}
	if len(a.KnownHosts) == 0 {
		return nil, fmt.Errorf("%w: SSH needs known_hosts (or InsecureIgnoreHostKey)", ErrInvalidAuth)
	}
	return knownHostsCallback(a.KnownHosts)
}

// knownHostsCallback checks host keys against known_hosts content with
// golang.org/x/crypto/ssh/knownhosts: plain, wildcard, negated and hashed
// host patterns, "@revoked" and "@cert-authority" lines. The package reads
// files only, so the content passes through a temporary file (known_hosts
// holds public keys, no secret) removed before it returns.
func knownHostsCallback(content []byte) (ssh.HostKeyCallback, error) {
	if len(bytes.TrimSpace(stripComments(content))) == 0 {
		return nil, fmt.Errorf("%w: known_hosts has no entries", ErrInvalidAuth)
	}
	f, err := os.CreateTemp("", "modwatch-known-hosts-")
	if err != nil {
		return nil, fmt.Errorf("gitutil: known_hosts: %w", err)
	}
	defer os.Remove(f.Name())
	_, werr := f.Write(content)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return nil, fmt.Errorf("gitutil: known_hosts: %w", werr)
	}
	cb, err := knownhosts.New(f.Name())
	if err != nil {
		// The message names the temporary file and a line number.
		msg := strings.ReplaceAll(err.Error(), f.Name(), "known_hosts")
		return nil, fmt.Errorf("%w: %s", ErrInvalidAuth, msg)
	}
	return func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		if err := cb(hostname, remote, key); err != nil {
			return fmt.Errorf("gitutil: host key of %s refused by known_hosts: %w", hostname, err)
		}
		return nil
	}, nil
}

func stripComments(content []byte) []byte {
	var out []byte
	for line := range bytes.Lines(content) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			out = append(out, line...)
		}
	}
	return out
}

// CredentialResolver finds the credentials for a repository URL. A nil Auth
// with a nil error means anonymous access. Implementations must be safe for
// concurrent use and should honour ctx, since they may read Secrets.
type CredentialResolver interface {
	Resolve(ctx context.Context, repoURL string) (*Auth, error)
}

// CredentialResolverFunc adapts a function to [CredentialResolver].
type CredentialResolverFunc func(ctx context.Context, repoURL string) (*Auth, error)

// Resolve calls f.
func (f CredentialResolverFunc) Resolve(ctx context.Context, repoURL string) (*Auth, error) {
	return f(ctx, repoURL)
}

// StaticCredentials maps URL prefixes to credentials; the longest matching
// prefix wins (see [URLPrefixes]).
type StaticCredentials struct {
	prefixes *URLPrefixes
	auths    []*Auth
}

// NewStaticCredentials builds a resolver from prefix → credentials. A prefix
// may be a full URL, an scp-like URL or a bare "host/path".
func NewStaticCredentials(byPrefix map[string]*Auth) (*StaticCredentials, error) {
	s := &StaticCredentials{}
	var prefixes []string
	for p, a := range byPrefix {
		prefixes = append(prefixes, p)
		s.auths = append(s.auths, a)
	}
	var err error
	if s.prefixes, err = NewURLPrefixes(prefixes); err != nil {
		return nil, err
	}
	return s, nil
}

// Resolve returns the credentials of the longest prefix matching repoURL.
func (s *StaticCredentials) Resolve(_ context.Context, repoURL string) (*Auth, error) {
	i, err := s.prefixes.Match(repoURL)
	if err != nil || i < 0 {
		return nil, err
	}
	return s.auths[i], nil
}

// URLPrefixes matches repository URLs against prefixes, as credential
// configurations name them. Prefixes and URLs are compared in their
// normalised form ([NormalizeURL]), so "https://git.example.com/platform"
// matches "git@git.example.com:platform/control.git". A prefix matches whole
// path segments only: "example.com/team" does not match
// "example.com/teamB/repo".
type URLPrefixes struct {
	keys  []string
	order []int // indexes of keys, longest first
}

// NewURLPrefixes checks and normalises prefixes. A prefix may be a full
// URL, an scp-like URL, a bare "host/path" or a bare host.
func NewURLPrefixes(prefixes []string) (*URLPrefixes, error) {
	p := &URLPrefixes{}
	for i, prefix := range prefixes {
		key, err := normalizePrefix(prefix)
		if err != nil {
			return nil, err
		}
		p.keys = append(p.keys, key)
		p.order = append(p.order, i)
	}
	sort.SliceStable(p.order, func(i, j int) bool { return len(p.keys[p.order[i]]) > len(p.keys[p.order[j]]) })
	return p, nil
}

// Match returns the index (in the slice given to NewURLPrefixes) of the
// longest prefix matching repoURL, or -1.
func (p *URLPrefixes) Match(repoURL string) (int, error) {
	key, err := NormalizeURL(repoURL)
	if err != nil {
		return -1, err
	}
	for _, i := range p.order {
		if key == p.keys[i] || strings.HasPrefix(key, p.keys[i]+"/") {
			return i, nil
		}
	}
	return -1, nil
}

// normalizePrefix turns a credential prefix ("https://host/group",
// "git@host:group", "host/group" or a bare "host") into the form of
// [Endpoint.Key], so that it can be matched against normalised URLs.
func normalizePrefix(p string) (string, error) {
	p = strings.TrimSpace(p)
	if !strings.Contains(p, "://") && !scpLike.MatchString(p) {
		p = "https://" + p
	}
	if key, err := NormalizeURL(p); err == nil {
		return key, nil
	}
	// A bare host: every repository on it.
	if u, err := url.Parse(p); err == nil && u.Host != "" && strings.Trim(u.Path, "/") == "" && u.User == nil {
		return strings.ToLower(u.Host), nil
	}
	return "", fmt.Errorf("%w: credential prefix %q", ErrInvalidURL, RedactURL(p))
}
