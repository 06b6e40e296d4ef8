package mirror

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/dev/gittest"
)

func TestBasicAuthAgainstServer(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/private")
	c := repo.Commit(t, "one", gittest.File("a", "a"))
	srv.SetBasicAuth("deploy", "right")
	creds, err := gitutil.NewStaticCredentials(map[string]*gitutil.Auth{srv.URL() + "/g": {Username: "deploy", Password: "right", AllowInsecureHTTP: true}})
	require.NoError(t, err)
	auth, err := creds.Resolve(context.Background(), repo.URL())
	require.NoError(t, err)
	m, err := Open(t.TempDir(), repo.URL(), Options{})
	require.NoError(t, err)
	res, err := m.Fetch(ctxT(t), auth, []string{"refs/heads/main"})
	require.NoError(t, err)
	assert.Equal(t, c, res.Refs["refs/heads/main"].String())
	repo.Commit(t, "two", gittest.File("a", "b"))
	_, err = m.Fetch(ctxT(t), &gitutil.Auth{Username: "deploy", Password: "wrong-pw", AllowInsecureHTTP: true}, []string{"refs/heads/main"})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "wrong-pw")
}

func TestCABundle(t *testing.T) {
	srv := gittest.NewTLSServer(t)
	repo := srv.NewRepo(t, "g/r")
	c := repo.Commit(t, "one", gittest.File("a", "a"))
	_, err := gitutil.ListRefs(ctxT(t), repo.URL(), nil, nil)
	require.Error(t, err, "an unknown CA is refused")
	refs, err := gitutil.ListRefs(ctxT(t), repo.URL(), &gitutil.Auth{CABundle: srv.CACert()}, nil)
	require.NoError(t, err)
	got, _ := refs.Commit("refs/heads/main")
	assert.Equal(t, c, got.String())
	_, err = gitutil.ListRefs(ctxT(t), repo.URL(), &gitutil.Auth{InsecureSkipTLSVerify: true}, nil)
	require.NoError(t, err)

	// The git CLI gets the bundle too.
	gitBin, statuses := recordingGit(t)
	m, err := Open(t.TempDir(), repo.URL(), Options{GitCLI: gitBin})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), &gitutil.Auth{CABundle: srv.CACert()}, []string{"refs/heads/main"})
	require.NoError(t, err)
	assert.Equal(t, "0\n", statuses())
}

// The network and the disk never see a URL with credentials: they come as
// an Auth.
func TestURLsWithCredentialsRefusedAtTheEdge(t *testing.T) {
	_, err := gitutil.ListRefs(t.Context(), "https://user:s3cret@example.com/r", nil, nil)
	require.ErrorIs(t, err, gitutil.ErrInvalidURL)
	assert.NotContains(t, err.Error(), "s3cret")
	_, err = Open(t.TempDir(), "https://s3cret@example.com/r", Options{})
	require.ErrorIs(t, err, gitutil.ErrInvalidURL)
	assert.NotContains(t, err.Error(), "s3cret")
}
