package githubapp

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeGitHub checks the App's JWT as GitHub does and issues tokens.
type fakeGitHub struct {
	clock   func() time.Time // GitHub's, the same as the resolver's
	pub     *rsa.PublicKey
	issued  atomic.Int32
	expires time.Time
}

func (f *fakeGitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/api/v3/app/installations/42/access_tokens" {
		http.NotFound(w, r)
		return
	}
	raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	tok, err := jwt.ParseWithClaims(raw, &jwt.RegisteredClaims{}, func(*jwt.Token) (any, error) { return f.pub, nil },
		jwt.WithValidMethods([]string{"RS256"}), jwt.WithIssuer("123"), jwt.WithExpirationRequired(), jwt.WithIssuedAt(), jwt.WithTimeFunc(f.clock))
	if !ok || err != nil || !tok.Valid {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"message":"A JSON web token could not be decoded"}`)
		return
	}
	n := f.issued.Add(1)
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{"token": fmt.Sprintf("ghs_token%d", n), "expires_at": f.expires})
}

func newKey(t *testing.T) (*rsa.PrivateKey, []byte) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	return key, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
}

func TestResolver(t *testing.T) {
	key, pemKey := newKey(t)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	gh := &fakeGitHub{clock: func() time.Time { return now }, pub: &key.PublicKey, expires: now.Add(time.Hour)}
	srv := httptest.NewTLSServer(gh)
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "https://")
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	r, err := New(Config{AppID: "123", InstallationID: 42, PrivateKey: pemKey, BaseURL: srv.URL + "/api/v3", CABundle: ca})
	require.NoError(t, err)
	r.now = func() time.Time { return now }
	ctx := context.Background()

	a, err := r.Resolve(ctx, "https://"+host+"/acme/app.git")
	require.NoError(t, err)
	require.NotNil(t, a)
	assert.Equal(t, "x-access-token", a.Username)
	assert.Equal(t, "ghs_token1", a.Password)
	assert.Equal(t, "github-app:123/42", a.ID)
	assert.NotContains(t, a.String(), "ghs_", "Auth.String never shows the token")

	// Kept until five minutes before it expires, then renewed.
	now = now.Add(54 * time.Minute)
	a, err = r.Resolve(ctx, "https://"+host+"/acme/other.git")
	require.NoError(t, err)
	assert.Equal(t, "ghs_token1", a.Password)
	assert.Equal(t, int32(1), gh.issued.Load())
	now = now.Add(2 * time.Minute)
	gh.expires = now.Add(time.Hour)
	a, err = r.Resolve(ctx, "https://"+host+"/acme/app.git")
	require.NoError(t, err)
	assert.Equal(t, "ghs_token2", a.Password)

	// The token goes to the App's host over HTTPS only.
	for _, u := range []string{"https://gitlab.com/acme/app.git", "http://" + host + "/acme/app.git", "git@" + host + ":acme/app.git", "https://" + host + ".evil.example/acme/app.git"} {
		a, err := r.Resolve(ctx, u)
		assert.NoError(t, err, u)
		assert.Nil(t, a, u)
	}
	assert.Equal(t, int32(2), gh.issued.Load())
}

func TestResolverRefused(t *testing.T) {
	key, _ := newKey(t)
	_, otherKey := newKey(t)
	gh := &fakeGitHub{clock: time.Now, pub: &key.PublicKey, expires: time.Now().Add(time.Hour)}
	srv := httptest.NewTLSServer(gh)
	defer srv.Close()
	r, err := New(Config{AppID: "123", InstallationID: 42, PrivateKey: otherKey, BaseURL: srv.URL + "/api/v3"})
	require.NoError(t, err)
	r.client = srv.Client()
	_, err = r.Resolve(context.Background(), srv.URL+"/acme/app.git")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "401")
	assert.Contains(t, err.Error(), "could not be decoded")
}

func TestNewRefusesBadConfigs(t *testing.T) {
	_, pemKey := newKey(t)
	for name, cfg := range map[string]Config{
		"no app":          {InstallationID: 1, PrivateKey: pemKey},
		"no installation": {AppID: "1", PrivateKey: pemKey},
		"no key":          {AppID: "1", InstallationID: 1},
		"not a key":       {AppID: "1", InstallationID: 1, PrivateKey: []byte("-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n")},
		"bad base URL":    {AppID: "1", InstallationID: 1, PrivateKey: pemKey, BaseURL: "ftp://h"},
		"bad CA bundle":   {AppID: "1", InstallationID: 1, PrivateKey: pemKey, CABundle: []byte("not PEM")},
	} {
		_, err := New(cfg)
		assert.ErrorIs(t, err, ErrInvalidConfig, name)
	}
	r, err := New(Config{AppID: "1", InstallationID: 1, PrivateKey: pemKey})
	require.NoError(t, err)
	assert.Equal(t, "github.com", r.host, "api.github.com gives tokens for github.com")
}
