package gitutil

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
)

func TestListRefsPeelsTags(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c1 := repo.Commit(t, "one", gittest.File("a.txt", "a"))
	repo.Tag(t, "v1.0.0", true)
	repo.Tag(t, "light", false)

	refs, err := ListRefs(ctxT(t), repo.URL(), nil, nil)
	require.NoError(t, err)
	assert.Equal(t, "refs/heads/main", refs.Head)
	got, ok := refs.Commit("refs/tags/v1.0.0")
	require.True(t, ok)
	assert.Equal(t, c1, got.String())
	assert.NotEqual(t, c1, refs.Refs["refs/tags/v1.0.0"].String(), "the tag object itself is listed unpeeled")
	got, _ = refs.Commit("refs/tags/light")
	assert.Equal(t, c1, got.String())
	assert.EqualValues(t, 1, repo.Counts().Lists.Load())
	assert.EqualValues(t, 0, repo.Counts().Fetches.Load())
}

func TestListRefsErrorsNameRemoteNotSecret(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/private")
	repo.Commit(t, "one", gittest.File("a", "a"))
	srv.SetBasicAuth("deploy", "right")

	_, err := ListRefs(ctxT(t), repo.URL(), &Auth{Username: "deploy", Password: "wrong-s3cret", AllowInsecureHTTP: true}, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "g/private")
	assert.NotContains(t, err.Error(), "wrong-s3cret")

	_, err = ListRefs(ctxT(t), repo.URL(), &Auth{Username: "deploy", Password: "right"}, nil)
	require.ErrorIs(t, err, ErrInsecureCredentials, "credentials over http need an opt-in")

	refs, err := ListRefs(ctxT(t), repo.URL(), &Auth{Username: "deploy", Password: "right", AllowInsecureHTTP: true}, nil)
	require.NoError(t, err)
	assert.Contains(t, refs.Refs, "refs/heads/main")

	u := "http://deploy:url-s3cret@" + srv.URL()[len("http://"):] + "/g/private.git"
	_, err = ListRefs(ctxT(t), u, nil, nil)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "url-s3cret")
}

func TestListRefsHonoursContext(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := ListRefs(ctx, repo.URL(), nil, nil)
	require.ErrorIs(t, err, context.Canceled)
}
