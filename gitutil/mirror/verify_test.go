package mirror

import (
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/hiddeco/sshsig"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"github.com/modwatch/modwatch/internal/dev/gittest"
)

func key(t *testing.T, name string) string {
	_, armored := gittest.SigningKey(t, name)
	return armored
}

// An SSH signature is checked over the very payload, in git's namespace,
// against the trusted keys only.
func TestVerifySSH(t *testing.T) {
	signer, pub := gittest.SSHSigningKey(t, "release")
	_, other := gittest.SSHSigningKey(t, "other")
	sign := func(payload, namespace string) string {
		sig, err := sshsig.Sign(strings.NewReader(payload), signer, sshsig.HashSHA512, namespace)
		require.NoError(t, err)
		return string(sshsig.Armor(sig))
	}
	ring := func(s string) []ssh.PublicKey {
		r, err := ParseKeyRing(s)
		require.NoError(t, err)
		return r.SSH
	}
	h := mustHash("0123456789012345678901234567890123456789")
	good := sign("tree 1\n", "git")
	id, err := verifySSH(ring(pub), "commit", plumbing.Hash(h), good, []byte("tree 1\n"))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(id, "SHA256:"))
	for name, tc := range map[string]struct {
		keys      []ssh.PublicKey
		signature string
		payload   string
	}{
		"another key":       {ring(other), good, "tree 1\n"},
		"no SSH key":        {nil, good, "tree 1\n"},
		"another payload":   {ring(pub), good, "tree 2\n"},
		"another namespace": {ring(pub), sign("tree 1\n", "file"), "tree 1\n"},
		"garbage":           {ring(pub), "-----BEGIN SSH SIGNATURE-----\nAAAA\n-----END SSH SIGNATURE-----\n", "tree 1\n"},
	} {
		_, err := verifySSH(tc.keys, "commit", plumbing.Hash(h), tc.signature, []byte(tc.payload))
		assert.ErrorIs(t, err, ErrUnverified, name)
	}
}

// A tag is checked at the mirror's ref and must lead to the commit the
// caller delivers; a lightweight tag has nothing to verify.
func TestVerifyTagChecksWhereItLeads(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	one := repo.Commit(t, "one", gittest.File("a", "1"))
	repo.Tag(t, "v1", true)
	two := repo.Commit(t, "two", gittest.File("a", "2"))
	repo.Tag(t, "light", false)
	m, err := Open(t.TempDir(), repo.URL(), Options{})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/tags/v1", "refs/tags/light"})
	require.NoError(t, err)
	keys := key(t, "k")

	_, err = m.VerifyTag("refs/tags/v1", mustHash(two), keys)
	assert.ErrorIs(t, err, ErrUnverified)
	assert.ErrorContains(t, err, "does not lead to")
	_, err = m.VerifyTag("refs/tags/v1", mustHash(one), keys)
	assert.ErrorIs(t, err, ErrUnverified)
	assert.ErrorContains(t, err, "not signed")
	_, err = m.VerifyTag("refs/tags/light", mustHash(two), keys)
	assert.ErrorIs(t, err, ErrUnverified)
	assert.ErrorContains(t, err, "not an annotated tag")
}
