package gitutil

import (
	"strings"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func armoredKey(t *testing.T, name string) string {
	e, err := openpgp.NewEntity(name, "", name+"@example.com", nil)
	require.NoError(t, err)
	var b strings.Builder
	w, err := armor.Encode(&b, openpgp.PublicKeyType, nil)
	require.NoError(t, err)
	require.NoError(t, e.Serialize(w))
	require.NoError(t, w.Close())
	return b.String()
}

// Every armored block is read, not only the first (go-git's Verify reads
// one); hostile input is an error, never a panic.
func TestParseKeyRing(t *testing.T) {
	a, b := armoredKey(t, "a"), armoredKey(t, "b")
	keys, err := ParseKeyRing(a + "\n" + b)
	require.NoError(t, err)
	assert.Len(t, keys, 2)
	keys, err = ParseKeyRing("comment before\n" + a)
	require.NoError(t, err)
	assert.Len(t, keys, 1)

	signature := "-----BEGIN PGP SIGNATURE-----\n\nwsBcBAABCAAQBQJ\n-----END PGP SIGNATURE-----\n"
	for name, in := range map[string]string{
		"empty":         "",
		"not armored":   "ssh-ed25519 AAAA",
		"truncated":     a[:len(a)/2],
		"a signature":   signature,
		"garbage body":  "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nAAAA\n-----END PGP PUBLIC KEY BLOCK-----\n",
		"too large":     a + strings.Repeat(" ", maxKeyRing),
		"only a header": "-----BEGIN PGP PUBLIC KEY BLOCK-----",
	} {
		_, err := ParseKeyRing(in)
		assert.Error(t, err, name)
	}
}
