package gitutil

import (
	"io/fs"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/gittest"
)

func TestSubmodules(t *testing.T) {
	srv := gittest.NewServer(t)
	lib := srv.NewRepo(t, "g/lib")
	pin := lib.Commit(t, "lib", gittest.File("lib.yaml", "x"))
	repo := srv.NewRepo(t, "g/app")
	c := repo.Commit(t, "with submodules",
		gittest.File("deploy/app.yaml", "a"),
		gittest.Submodule("deploy/vendor/lib", lib.URL(), pin),
		gittest.Submodule("tools/lib", lib.URL(), pin))
	m, err := OpenMirror(t.TempDir(), repo.URL(), MirrorOptions{})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	h := plumbing.NewHash(c)

	for p, want := range map[string][]string{
		"":        {"deploy/vendor/lib", "tools/lib"},
		"deploy":  {"vendor/lib"},
		"deploy/": {"vendor/lib"},
		"tools":   {"lib"},
		"docs":    nil,
		"dep":     nil, // a prefix of a name is not a parent
	} {
		got, err := m.Submodules(h, at(p))
		require.NoError(t, err, p)
		assert.Equal(t, want, got, "path %q", p)
	}
	fsys, err := m.FS(h, at("deploy"))
	require.NoError(t, err)
	_, err = fs.Stat(fsys, "vendor/lib")
	assert.ErrorIs(t, err, fs.ErrNotExist, "the file system leaves it out: hence the list")

	// A .gitmodules naming what is not a gitlink, or escaping, names nothing;
	// one that cannot be parsed is an error.
	c2 := repo.Commit(t, "hostile", gittest.File(".gitmodules",
		"[submodule \"x\"]\n\tpath = deploy/app.yaml\n[submodule \"y\"]\n\tpath = ../../etc\n"))
	got, err := m.FetchCommit(ctxT(t), nil, plumbing.NewHash(c2))
	require.NoError(t, err)
	require.True(t, got.Fetched)
	subs, err := m.Submodules(plumbing.NewHash(c2), at(""))
	require.NoError(t, err)
	assert.Empty(t, subs)
	c3 := repo.Commit(t, "broken", gittest.File(".gitmodules", "[submodule \"x\"\n"+strings.Repeat("=", 10)))
	_, err = m.FetchCommit(ctxT(t), nil, plumbing.NewHash(c3))
	require.NoError(t, err)
	_, err = m.Submodules(plumbing.NewHash(c3), at(""))
	assert.Error(t, err)
}
