package keyring

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
)

func key(t *testing.T, name string) string {
	_, armored := gittest.SigningKey(t, name)
	return armored
}

// parse is Parse, its keys in a ring.
func parse(keys string) (*ring, error) {
	pgp, ssh, err := Parse(keys)
	return &ring{OpenPGP: pgp, SSH: ssh}, err
}

// Every armored block is read, not only the first (go-git's Verify reads
// one); hostile input is an error, never a panic.
func TestParse(t *testing.T) {
	a, b := key(t, "a"), key(t, "b")
	_, sshA := gittest.SSHSigningKey(t, "a")
	_, sshB := gittest.SSHSigningKey(t, "b")
	keys, err := parse(a + "\n" + b)
	require.NoError(t, err)
	assert.Len(t, keys.OpenPGP, 2)
	keys, err = parse("comment before\n" + a)
	require.NoError(t, err)
	assert.Len(t, keys.OpenPGP, 1)
	// SSH keys around and between the blocks, joined without newlines too.
	keys, err = parse(sshA + a + sshB + "# a comment\n" + b)
	require.NoError(t, err)
	assert.Len(t, keys.OpenPGP, 2)
	assert.Len(t, keys.SSH, 2)
	keys, err = parse(`namespaces="git" ` + sshA)
	require.NoError(t, err, "authorized_keys options")
	assert.Len(t, keys.SSH, 1)

	signature := "-----BEGIN PGP SIGNATURE-----\n\nwsBcBAABCAAQBQJ\n-----END PGP SIGNATURE-----\n"
	for name, in := range map[string]string{
		"empty":          "",
		"not armored":    "just text",
		"broken SSH key": "ssh-ed25519 AAAA",
		"SSH key junk":   a + "\nssh-rsa !!!\n",
		"truncated":      a[:len(a)/2],
		"a signature":    signature,
		"garbage body":   "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nAAAA\n-----END PGP PUBLIC KEY BLOCK-----\n",
		"too large":      a + strings.Repeat(" ", maxKeyRing),
		"only a header":  "-----BEGIN PGP PUBLIC KEY BLOCK-----",
	} {
		_, err := parse(in)
		assert.Error(t, err, name)
	}
}
