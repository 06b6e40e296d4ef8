package gitutil

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
)

// A Lister remembers at most its bound of repositories and servers
// however many it lists: a process that lists a new URL every poll does
// not grow. What it forgot it asks again.
func TestListerForgetsPastItsBound(t *testing.T) {
	const repos, servers = 4, 2
	srv := gittest.NewServer(t)
	l := newLister(repos, servers, 2)
	var urls []string
	for i := range 3 * repos {
		repo := srv.NewRepo(t, fmt.Sprintf("g/r%d", i))
		repo.Commit(t, "1", gittest.File("f", fmt.Sprint(i)))
		urls = append(urls, repo.URL())
	}
	for range 2 {
		for _, u := range urls {
			_, err := l.ListRefs(ctxT(t), u, nil, []string{"HEAD"})
			require.NoError(t, err)
			assert.LessOrEqual(t, l.repos.Len(), repos)
		}
	}
	assert.Equal(t, repos, l.repos.Len())
	assert.True(t, l.SpeaksV2(urls[0]), "the server is remembered")
	allows, err := l.AllowsFilter(ctxT(t), urls[0], Transport{Auth: &Auth{}})
	require.NoError(t, err)
	for i := range 10 * servers {
		host := fmt.Sprintf("https://host-%d.example", i)
		l.noV2.Add(host, struct{}{})
		l.v2Servers.Add(host, struct{}{})
		l.features.Add(host, "")
		assert.LessOrEqual(t, l.noV2.Len(), servers)
		assert.LessOrEqual(t, l.v2Servers.Len(), servers)
		assert.LessOrEqual(t, l.features.Len(), servers)
	}
	assert.False(t, l.SpeaksV2(urls[0]), "forgotten")
	again, err := l.AllowsFilter(ctxT(t), urls[0], Transport{Auth: &Auth{}})
	require.NoError(t, err)
	assert.Equal(t, allows, again, "asked again")
}

// Two Listers share nothing: what one learned the other asks.
func TestListersShareNothing(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	repo.Commit(t, "1", gittest.File("f", "1"))
	one, two := NewLister(), NewLister()
	_, err := one.ListRefs(ctxT(t), repo.URL(), nil, []string{"HEAD"})
	require.NoError(t, err)
	asked := repo.Counts().Capabilities.Load()
	require.Positive(t, asked)
	assert.True(t, one.SpeaksV2(repo.URL()))
	assert.False(t, two.SpeaksV2(repo.URL()))
	_, err = two.ListRefs(ctxT(t), repo.URL(), nil, []string{"HEAD"})
	require.NoError(t, err)
	assert.Greater(t, repo.Counts().Capabilities.Load(), asked, "the second asked the server itself")
}
