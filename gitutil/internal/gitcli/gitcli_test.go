package gitcli

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil"
)

// A credential reaches git through its environment and private files,
// which done removes; nothing is prompted for.
func TestEnvKeepsCredentialsPrivate(t *testing.T) {
	tmp := t.TempDir()
	e, err := gitutil.ParseURL("https://example.com/repo.git")
	require.NoError(t, err)
	env, done, err := Env(tmp, e, gitutil.Transport{Auth: &gitutil.Auth{BearerToken: "secret", CABundle: []byte("ca")}}, [2]string{"a.b", "c"})
	require.NoError(t, err)
	assert.Contains(t, env, "GIT_TERMINAL_PROMPT=0")
	assert.Contains(t, env, "GIT_CONFIG_COUNT=2")
	assert.Contains(t, env, "GIT_CONFIG_KEY_0=a.b")
	assert.Contains(t, env, "GIT_CONFIG_VALUE_1=Authorization: Bearer secret")
	var ca string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "GIT_SSL_CAINFO="); ok {
			ca = v
		}
	}
	require.NotEmpty(t, ca)
	assert.Equal(t, tmp, filepath.Dir(filepath.Dir(ca)))
	info, err := os.Stat(ca)
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o600), info.Mode().Perm())
	done()
	_, err = os.Stat(filepath.Dir(ca))
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

func TestCloneBranch(t *testing.T) {
	b, err := CloneBranch([]string{"refs/pull/1/head", "refs/tags/v1", "refs/heads/main"})
	require.NoError(t, err)
	assert.Equal(t, "v1", b)
	_, err = CloneBranch([]string{"refs/pull/1/head"})
	assert.Error(t, err)
}

// What a command writes past 4 KiB keeps only its end.
func TestTailBufferKeepsTheEnd(t *testing.T) {
	var b TailBuffer
	n, err := b.Write([]byte(strings.Repeat("a", 5000)))
	require.NoError(t, err)
	assert.Equal(t, 5000, n)
	_, _ = b.Write([]byte("end"))
	assert.Len(t, b.String(), tailKeep)
	assert.True(t, strings.HasSuffix(b.String(), "aend"))
}
