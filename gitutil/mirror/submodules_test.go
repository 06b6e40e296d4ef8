package mirror

import (
	"io/fs"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
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
	m, err := Open(t.TempDir(), repo.URL(), Options{})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	h := mustHash(c)

	for p, want := range map[string][]string{
		"":        {"deploy/vendor/lib", "tools/lib"},
		"deploy":  {"vendor/lib"},
		"deploy/": {"vendor/lib"},
		"tools":   {"lib"},
		"docs":    nil,
		"dep":     nil, // a prefix of a name is not a parent
	} {
		got, err := m.Submodules(ctxT(t), h, at(p))
		require.NoError(t, err, p)
		var paths []string
		for _, sm := range got {
			paths = append(paths, sm.Path)
			assert.Equal(t, pin, sm.Commit.String(), "the pinned commit")
			assert.Equal(t, lib.URL(), sm.URL)
		}
		assert.Equal(t, want, paths, "path %q", p)
	}
	fsys, err := m.FS(h, at("deploy"))
	require.NoError(t, err)
	_, err = fs.Stat(fsys, "vendor/lib")
	assert.ErrorIs(t, err, fs.ErrNotExist, "the file system leaves it out: hence the list")

	// A .gitmodules naming what is not a gitlink, or escaping, names nothing;
	// one that cannot be parsed is an error.
	c2 := repo.Commit(t, "hostile", gittest.File(".gitmodules",
		"[submodule \"x\"]\n\tpath = deploy/app.yaml\n[submodule \"y\"]\n\tpath = ../../etc\n"))
	got, err := m.FetchCommit(ctxT(t), nil, mustHash(c2))
	require.NoError(t, err)
	require.True(t, got.Fetched)
	subs, err := m.Submodules(ctxT(t), mustHash(c2), at(""))
	require.NoError(t, err)
	assert.Empty(t, subs)
	c3 := repo.Commit(t, "broken", gittest.File(".gitmodules", "[submodule \"x\"\n"+strings.Repeat("=", 10)))
	_, err = m.FetchCommit(ctxT(t), nil, mustHash(c3))
	require.NoError(t, err)
	_, err = m.Submodules(ctxT(t), mustHash(c3), at(""))
	assert.Error(t, err)
}

// Relative submodule URLs resolve against the superproject's as git
// resolves them, and never above its host; anything else must be a URL the
// watcher accepts.
func TestResolveSubmoduleURL(t *testing.T) {
	for _, tc := range []struct{ super, sub, want string }{
		{"https://h/org/app.git", "../lib.git", "https://h/org/lib.git"},
		{"https://h/org/app.git", "./lib", "https://h/org/app.git/lib"},
		{"https://h/org/app", "../../../../x.git", "https://h/x.git"},
		{"https://h:8443/org/app.git", "../lib.git", "https://h:8443/org/lib.git"},
		{"ssh://git@h/org/app.git", "../lib.git", "ssh://git@h/org/lib.git"},
		{"git@h:org/app.git", "../lib.git", "git@h:org/lib.git"},
		{"https://h/org/app.git", "https://other/x.git", "https://other/x.git"},
		{"https://h/org/app.git", "git@other:x.git", "git@other:x.git"},
	} {
		got, err := ResolveSubmoduleURL(tc.super, tc.sub)
		require.NoError(t, err, tc.sub)
		assert.Equal(t, tc.want, got, "%s in %s", tc.sub, tc.super)
	}
	for _, sub := range []string{"ext::sh -c touch% /tmp/pwned", "-uhack", "", "https://h/x\nHost: evil", "fd::17"} {
		_, err := ResolveSubmoduleURL("https://h/org/app.git", sub)
		assert.Error(t, err, "%q", sub)
	}
}
