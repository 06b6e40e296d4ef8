package gitutil

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestProxyRefusesWhatItCannotUse(t *testing.T) {
	for name, tc := range map[string]struct {
		url   string
		proxy Proxy
	}{
		"credentials in the URL": {"https://h/r", Proxy{URL: "http://u:p@proxy:3128"}},
		"unknown scheme":         {"https://h/r", Proxy{URL: "ftp://proxy:21"}},
		"no host":                {"https://h/r", Proxy{URL: "proxy:3128"}},
		"a path":                 {"https://h/r", Proxy{URL: "http://proxy:3128/x"}},
		"a newline":              {"https://h/r", Proxy{URL: "http://proxy:3128\n"}},
		"an ssh remote":          {"ssh://git@h/r", Proxy{URL: "http://proxy:3128"}},
	} {
		e, err := ParseURL(tc.url)
		require.NoError(t, err)
		a := &Auth{Proxy: &tc.proxy, SSHPrivateKey: nil, InsecureIgnoreHostKey: true}
		_, err = a.Transport(e)
		assert.ErrorIs(t, err, ErrInvalidAuth, name)
		assert.NotContains(t, err.Error(), "u:p@", name)
	}
	// The proxy is part of who reads a remote: two targets behind
	// different proxies never share a poller, whose proxy would carry the
	// other's traffic.
	a := &Auth{ID: "secret:ns/git", Proxy: &Proxy{URL: "http://proxy-a:3128"}}
	b := &Auth{ID: "secret:ns/git", Proxy: &Proxy{URL: "http://proxy-b:3128"}}
	assert.NotEqual(t, a.Identity(), b.Identity())
	assert.NotEqual(t, "anonymous", (&Auth{Proxy: &Proxy{URL: "http://proxy-a:3128"}}).Identity())
}
