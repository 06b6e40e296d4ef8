package mirror

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/dev/gittest"
)

// sshKey returns a new key pair: PEM private key and public key.
func sshKey(t *testing.T) ([]byte, ssh.PublicKey) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	block, err := ssh.MarshalPrivateKey(priv, "")
	require.NoError(t, err)
	sshPub, err := ssh.NewPublicKey(pub)
	require.NoError(t, err)
	return pem.EncodeToMemory(block), sshPub
}

func TestSSHWithKnownHosts(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "one", gittest.File("a", "1"))
	key, pub := sshKey(t)
	sshSrv := srv.StartSSH(t, pub)
	url := sshSrv.URL(repo.Name())
	auth := &gitutil.Auth{SSHPrivateKey: key, KnownHosts: sshSrv.KnownHosts()}

	refs, err := gitutil.ListRefs(ctxT(t), url, auth, nil)
	require.NoError(t, err)
	got, _ := refs.Commit("refs/heads/main")
	assert.Equal(t, c1, got.String())

	// With go-git, then with the git CLI (the system ssh) for the first fetch.
	gitBin, statuses := recordingGit(t)
	for _, cli := range []string{"", gitBin} {
		m, err := Open(t.TempDir(), url, Options{GitCLI: cli})
		require.NoError(t, err)
		res, err := m.Fetch(ctxT(t), auth, []string{"refs/heads/main"})
		require.NoError(t, err, "cli=%q", cli)
		assert.Equal(t, c1, res.Refs["refs/heads/main"].String())
	}
	assert.Equal(t, "0\n", statuses(), "the CLI fetched over ssh")

	// A host key that is not the server's is refused.
	_, otherPub := sshKey(t)
	other := &gitutil.Auth{SSHPrivateKey: key, KnownHosts: []byte("[127.0.0.1]:1 " + string(ssh.MarshalAuthorizedKey(otherPub)))}
	_, err = gitutil.ListRefs(ctxT(t), url, other, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "known_hosts")

	// A key the server does not know is refused.
	otherKey, _ := sshKey(t)
	_, err = gitutil.ListRefs(ctxT(t), url, &gitutil.Auth{SSHPrivateKey: otherKey, KnownHosts: sshSrv.KnownHosts()}, nil)
	require.Error(t, err)
}

// Several keys are offered in turn, as ssh offers each -i: the one the
// server knows, second, is taken by go-git and by the git CLI.
func TestSSHOffersEachKey(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "one", gittest.File("a", "1"))
	key, pub := sshKey(t)
	unknown, _ := sshKey(t)
	sshSrv := srv.StartSSH(t, pub)
	url := sshSrv.URL(repo.Name())
	auth := &gitutil.Auth{SSHPrivateKey: unknown, SSHPrivateKeys: [][]byte{key}, KnownHosts: sshSrv.KnownHosts()}
	assert.Equal(t, "ssh-key", auth.String())

	refs, err := gitutil.ListRefs(ctxT(t), url, auth, nil)
	require.NoError(t, err)
	got, _ := refs.Commit("refs/heads/main")
	assert.Equal(t, c1, got.String())
	gitBin, statuses := recordingGit(t)
	m, err := Open(t.TempDir(), url, Options{GitCLI: gitBin})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), auth, []string{"refs/heads/main"})
	require.NoError(t, err)
	assert.Equal(t, "0\n", statuses(), "the CLI fetched over ssh with the second key")

	// Only in SSHPrivateKeys is a key too.
	_, err = gitutil.ListRefs(ctxT(t), url, &gitutil.Auth{SSHPrivateKeys: [][]byte{key}, KnownHosts: sshSrv.KnownHosts()}, nil)
	require.NoError(t, err)
	assert.NotEqual(t, (&gitutil.Auth{SSHPrivateKey: unknown}).Identity(), auth.Identity(), "more keys are another identity")
}
