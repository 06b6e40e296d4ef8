// Package githubapp is a gitutil.CredentialResolver for a GitHub App
// installation: it signs a JWT with the App's private key, exchanges it for
// an installation access token (valid an hour), keeps the token and renews
// it five minutes before it expires. It answers only for repositories on
// the App's own host, so the token never travels anywhere else.
//
// This is what Flux's GitRepository `provider: github` does; any source
// can use it through watcher.WithCredentials.
package githubapp

import (
	"context"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/modwatch/modwatch/gitutil"
)

// DefaultBaseURL is github.com's API.
const DefaultBaseURL = "https://api.github.com"

// Config names an installation of a GitHub App.
type Config struct {
	// AppID is the App's ID (or its client ID).
	AppID string
	// InstallationID is the installation's ID.
	InstallationID int64
	// PrivateKey is the App's private key, PEM (PKCS#1 or PKCS#8 RSA).
	PrivateKey []byte
	// BaseURL is the API's address: DefaultBaseURL (the default) or, for
	// GitHub Enterprise Server, "https://HOST/api/v3". Tokens are given for
	// repositories on github.com, or on HOST.
	BaseURL string
	// CABundle is the PEM of the CAs to trust for the API (a GitHub
	// Enterprise Server with a private CA); none: the system's.
	CABundle []byte
}

// ErrInvalidConfig is returned (wrapped) by New for a Config it cannot use.
var ErrInvalidConfig = errors.New("githubapp: invalid config")

// renewBefore is how long before its expiry a token is replaced.
const renewBefore = 5 * time.Minute

// Resolver hands out the installation's token. It is safe for concurrent
// use: concurrent calls share one exchange.
type Resolver struct {
	cfg    Config
	key    *rsa.PrivateKey
	host   string // where tokens may go
	client *http.Client
	now    func() time.Time

	mu      sync.Mutex
	token   string
	expires time.Time
}

var _ gitutil.CredentialResolver = (*Resolver)(nil)

// New checks cfg and parses the key.
func New(cfg Config) (*Resolver, error) {
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	cfg.BaseURL = strings.TrimSuffix(cfg.BaseURL, "/")
	u, err := url.Parse(cfg.BaseURL)
	switch {
	case err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		return nil, fmt.Errorf("%w: base URL %q", ErrInvalidConfig, cfg.BaseURL)
	case cfg.AppID == "":
		return nil, fmt.Errorf("%w: app ID is empty", ErrInvalidConfig)
	case cfg.InstallationID <= 0:
		return nil, fmt.Errorf("%w: installation ID is not positive", ErrInvalidConfig)
	}
	key, err := jwt.ParseRSAPrivateKeyFromPEM(cfg.PrivateKey)
	if err != nil {
		return nil, fmt.Errorf("%w: private key: %w", ErrInvalidConfig, err)
	}
	host := u.Host
	if host == "api.github.com" {
		host = "github.com"
	}
	client := &http.Client{Timeout: 30 * time.Second}
	if len(cfg.CABundle) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(cfg.CABundle) {
			return nil, fmt.Errorf("%w: CA bundle holds no PEM certificate", ErrInvalidConfig)
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		client.Transport = tr
	}
	return &Resolver{cfg: cfg, key: key, host: strings.ToLower(host), client: client, now: time.Now}, nil
}

// ID is the stable identity of the credentials (gitutil.Auth.ID): mirrors
// fetched with them are shared by the installation's targets only.
func (r *Resolver) ID() string {
	return "github-app:" + r.cfg.AppID + "/" + strconv.FormatInt(r.cfg.InstallationID, 10)
}

// Resolve implements gitutil.CredentialResolver: the installation's token
// for a repository on the App's host (HTTPS), nil (anonymous) elsewhere.
func (r *Resolver) Resolve(ctx context.Context, repoURL string) (*gitutil.Auth, error) {
	ep, err := gitutil.ParseURL(repoURL)
	if err != nil || ep.Scheme != "https" || !strings.EqualFold(ep.Host, r.host) {
		return nil, nil
	}
	token, err := r.current(ctx)
	if err != nil {
		return nil, err
	}
	return &gitutil.Auth{ID: r.ID(), Username: "x-access-token", Password: token}, nil
}

// current returns the token, exchanging a new one when it is missing or
// about to expire.
func (r *Resolver) current(ctx context.Context) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.token != "" && r.now().Before(r.expires.Add(-renewBefore)) {
		return r.token, nil
	}
	token, expires, err := r.exchange(ctx)
	if err != nil {
		return "", err
	}
	r.token, r.expires = token, expires
	return token, nil
}

// exchange signs a JWT and trades it for an installation token.
func (r *Resolver) exchange(ctx context.Context) (string, time.Time, error) {
	now := r.now()
	signed, err := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.RegisteredClaims{
		Issuer:    r.cfg.AppID,
		IssuedAt:  jwt.NewNumericDate(now.Add(-time.Minute)), // clock skew, as GitHub advises
		ExpiresAt: jwt.NewNumericDate(now.Add(9 * time.Minute)),
	}).SignedString(r.key)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("githubapp: sign: %w", err)
	}
	endpoint := fmt.Sprintf("%s/app/installations/%d/access_tokens", r.cfg.BaseURL, r.cfg.InstallationID)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, nil)
	if err != nil {
		return "", time.Time{}, err
	}
	req.Header.Set("Authorization", "Bearer "+signed)
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	resp, err := r.client.Do(req)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("githubapp: installation %d: %w", r.cfg.InstallationID, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return "", time.Time{}, fmt.Errorf("githubapp: installation %d: %w", r.cfg.InstallationID, err)
	}
	if resp.StatusCode != http.StatusCreated {
		var e struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(body, &e)
		return "", time.Time{}, fmt.Errorf("githubapp: installation %d: %s: %s", r.cfg.InstallationID, resp.Status, e.Message)
	}
	var t struct {
		Token     string    `json:"token"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	if err := json.Unmarshal(body, &t); err != nil || t.Token == "" || t.ExpiresAt.IsZero() {
		return "", time.Time{}, fmt.Errorf("githubapp: installation %d: the answer has no token and expiry", r.cfg.InstallationID)
	}
	return t.Token, t.ExpiresAt, nil
}
