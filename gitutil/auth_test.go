package gitutil

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

func TestStaticCredentialsLongestPrefixWins(t *testing.T) {
	platform := &Auth{Username: "platform", Password: "p"}
	control := &Auth{Username: "control", Password: "c"}
	team := &Auth{BearerToken: "t"}
	host := &Auth{BearerToken: "h"}
	creds, err := NewStaticCredentials(map[string]*Auth{
		"https://git.example.com/platform": platform,
		"git.example.com/platform/control": control,
		"git@other.example.com:team":       team,
		"Third.example.com":                host,
	})
	require.NoError(t, err)
	for _, tc := range []struct {
		url  string
		want *Auth
	}{
		{"https://git.example.com/platform/app.git", platform},
		{"git@git.example.com:platform/control.git", control},
		{"ssh://git@git.example.com/platform/control/sub.git", control},
		{"https://GIT.example.com/platform/controller", platform},
		{"https://other.example.com/team/r", team},
		{"https://other.example.com/teamB/r", nil},
		{"https://git.example.com/elsewhere/r", nil},
		{"git@third.example.com:any/repo.git", host},
		{"https://third.example.com.evil.com/r", nil},
	} {
		got, err := creds.Resolve(context.Background(), tc.url)
		require.NoError(t, err, tc.url)
		assert.Same(t, tc.want, got, tc.url)
	}
	_, err = creds.Resolve(context.Background(), "ftp://x/y")
	require.ErrorIs(t, err, ErrInvalidURL)
	_, err = NewStaticCredentials(map[string]*Auth{"": platform})
	require.ErrorIs(t, err, ErrInvalidURL)
}

func TestAuthForEndpoint(t *testing.T) {
	https, _ := ParseURL("https://h/r")
	http, _ := ParseURL("http://h/r")
	sshURL, _ := ParseURL("git@h:r")
	key := newKeyPEM(t)
	for _, tc := range []struct {
		name    string
		auth    *Auth
		ep      Endpoint
		wantErr error
	}{
		{"anonymous https", nil, https, nil},
		{"basic over https", &Auth{Username: "u", Password: "p"}, https, nil},
		{"bearer over https", &Auth{BearerToken: "t"}, https, nil},
		{"basic over http refused", &Auth{Username: "u", Password: "p"}, http, ErrInsecureCredentials},
		{"basic over http opted in", &Auth{Username: "u", Password: "p", AllowInsecureHTTP: true}, http, nil},
		{"anonymous http", nil, http, nil},
		{"ssh key on https", &Auth{SSHPrivateKey: key}, https, ErrInvalidAuth},
		{"ssh without known_hosts", &Auth{SSHPrivateKey: key}, sshURL, ErrInvalidAuth},
		{"ssh ignoring host keys", &Auth{SSHPrivateKey: key, InsecureIgnoreHostKey: true}, sshURL, nil},
		{"ssh without a key", &Auth{KnownHosts: []byte("h ssh-ed25519 AAAA")}, sshURL, ErrInvalidAuth},
		{"ssh with a password only", &Auth{Password: "p", InsecureIgnoreHostKey: true}, sshURL, ErrInvalidAuth},
		{"bad key", &Auth{SSHPrivateKey: []byte("-----BEGIN OPENSSH PRIVATE KEY-----\nc2VjcmV0LWtleS1tYXRlcmlhbA==\n-----END OPENSSH PRIVATE KEY-----\n"), InsecureIgnoreHostKey: true}, sshURL, ErrInvalidAuth},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.auth.Transport(tc.ep)
			if tc.wantErr == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.wantErr)
			assert.NotContains(t, err.Error(), "secret-key-material")
		})
	}
}

func TestAuthStringAndIdentityHideSecrets(t *testing.T) {
	a := &Auth{Username: "deploy", Password: "hunter2", BearerToken: "tok3n"}
	for _, s := range []string{a.String(), fmt.Sprint(a), fmt.Sprintf("%v", a), a.Identity()} {
		assert.NotContains(t, s, "hunter2")
		assert.NotContains(t, s, "tok3n")
	}
	assert.Equal(t, "anonymous", (*Auth)(nil).Identity())
	assert.Equal(t, "anonymous", (&Auth{}).Identity())
	assert.Equal(t, a.Identity(), (&Auth{Username: "deploy", Password: "hunter2", BearerToken: "tok3n"}).Identity())
	assert.NotEqual(t, a.Identity(), (&Auth{Username: "deploy", Password: "other", BearerToken: "tok3n"}).Identity())
}

func TestKnownHosts(t *testing.T) {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	hostKey, err := ssh.NewPublicKey(pub)
	require.NoError(t, err)
	otherPub, _, _ := ed25519.GenerateKey(rand.Reader)
	otherKey, _ := ssh.NewPublicKey(otherPub)
	addr := &net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 22}
	caPub, caPriv, _ := ed25519.GenerateKey(rand.Reader)
	caKey, _ := ssh.NewPublicKey(caPub)
	caSigner, _ := ssh.NewSignerFromKey(caPriv)
	cert := &ssh.Certificate{Key: hostKey, CertType: ssh.HostCert, ValidPrincipals: []string{"git.example.com"}, ValidBefore: ssh.CertTimeInfinity}
	require.NoError(t, cert.SignCert(rand.Reader, caSigner))
	caLine := "@cert-authority *.example.com " + string(ssh.MarshalAuthorizedKey(caKey))

	for _, tc := range []struct {
		name, line, host string
		key              ssh.PublicKey
		ok               bool
	}{
		{"plain", knownhosts.Line([]string{"git.example.com"}, hostKey), "git.example.com:22", hostKey, true},
		{"port", knownhosts.Line([]string{"[git.example.com]:2222"}, hostKey), "git.example.com:2222", hostKey, true},
		{"wrong port", knownhosts.Line([]string{"[git.example.com]:2222"}, hostKey), "git.example.com:22", hostKey, false},
		{"hashed", knownhosts.Line([]string{knownhosts.HashHostname("git.example.com")}, hostKey), "git.example.com:22", hostKey, true},
		{"other key", knownhosts.Line([]string{"git.example.com"}, hostKey), "git.example.com:22", otherKey, false},
		{"other host", knownhosts.Line([]string{"git.example.com"}, hostKey), "evil.example.com:22", hostKey, false},
		{"wildcard", knownhosts.Line([]string{"*.example.com"}, hostKey), "git.example.com:22", hostKey, true},
		{"negated", knownhosts.Line([]string{"*.example.com", "!evil.example.com"}, hostKey), "evil.example.com:22", hostKey, false},
		{"cert-authority", caLine, "git.example.com:22", cert, true},
		{"cert-authority other host", caLine, "git.other.org:22", cert, false},
		{"cert-authority plain key", caLine, "git.example.com:22", hostKey, false},
		{"revoked", "@revoked " + knownhosts.Line([]string{"git.example.com"}, hostKey) + "\n" + knownhosts.Line([]string{"git.example.com"}, hostKey), "git.example.com:22", hostKey, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cb, err := knownHostsCallback([]byte("# comment\n\n" + tc.line + "\n"))
			require.NoError(t, err)
			err = cb(tc.host, addr, tc.key)
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
		})
	}
	_, err = knownHostsCallback([]byte("# nothing\n"))
	require.ErrorIs(t, err, ErrInvalidAuth)
	_, err = knownHostsCallback([]byte("garbage line without a key\n"))
	require.ErrorIs(t, err, ErrInvalidAuth)
}

func newKeyPEM(t *testing.T) []byte {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	block, err := ssh.MarshalPrivateKey(priv, "")
	require.NoError(t, err)
	return pem.EncodeToMemory(block)
}
