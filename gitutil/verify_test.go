package gitutil

import (
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/gittest"
)

func key(t *testing.T, name string) string {
	_, armored := gittest.SigningKey(t, name)
	return armored
}

// Every armored block is read, not only the first (go-git's Verify reads
// one); hostile input is an error, never a panic.
func TestParseKeyRing(t *testing.T) {
	a, b := key(t, "a"), key(t, "b")
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

// A tag is checked at the mirror's ref and must lead to the commit the
// caller delivers; a lightweight tag has nothing to verify.
func TestVerifyTagChecksWhereItLeads(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	one := repo.Commit(t, "one", gittest.File("a", "1"))
	repo.Tag(t, "v1", true)
	two := repo.Commit(t, "two", gittest.File("a", "2"))
	repo.Tag(t, "light", false)
	m, err := OpenMirror(t.TempDir(), repo.URL(), MirrorOptions{})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/tags/v1", "refs/tags/light"})
	require.NoError(t, err)
	keys := key(t, "k")

	_, err = m.VerifyTag("refs/tags/v1", plumbing.NewHash(two), keys)
	assert.ErrorIs(t, err, ErrUnverified)
	assert.ErrorContains(t, err, "does not lead to")
	_, err = m.VerifyTag("refs/tags/v1", plumbing.NewHash(one), keys)
	assert.ErrorIs(t, err, ErrUnverified)
	assert.ErrorContains(t, err, "not signed")
	_, err = m.VerifyTag("refs/tags/light", plumbing.NewHash(two), keys)
	assert.ErrorIs(t, err, ErrUnverified)
	assert.ErrorContains(t, err, "not an annotated tag")
}
