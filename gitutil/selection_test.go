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

// files lists every file of fsys, sorted, and checks each can be read.
func files(t *testing.T, fsys fs.FS) []string {
	t.Helper()
	var out []string
	require.NoError(t, fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		out = append(out, p)
		if d.Type()&fs.ModeSymlink != 0 {
			return nil // it may dangle
		}
		_, err = fs.ReadFile(fsys, p)
		return err
	}))
	return out
}

func TestSelection(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/sel")
	c1 := repo.Commit(t, "one",
		gittest.File("apps/a/app.yaml", "a"),
		gittest.File("apps/a/README.md", "readme"),
		gittest.File("apps/b/app.yaml", "b"),
		gittest.File("apps/b/logo.png", "png"),
		gittest.File("apps/b/build/out.yaml", "generated"),
		gittest.File("apps/b/.sourceignore", "# generated\nbuild/\n!keep.md\n"),
		gittest.File("apps/b/keep.md", "kept"),
		gittest.File("infra/db.yaml", "db"),
		gittest.File("docs/guide.md", "guide"),
		gittest.Symlink("apps/a/link.png", "app.yaml"),
		gittest.Symlink("apps/a/to-build", "../b/build/out.yaml"),
		gittest.Symlink("apps/a/to-docs", "../../docs/guide.md"),
	)
	m, err := OpenMirror(t.TempDir(), repo.URL(), MirrorOptions{})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	h1 := plumbing.NewHash(c1)

	sel := Selection{
		Paths:      []string{"apps", "infra/db.yaml", "apps/a"}, // apps/a is inside apps
		Ignore:     []string{"# images", "*.png", "", "*.md"},
		IgnoreFile: ".sourceignore",
	}
	fsys, err := m.FS(h1, sel)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"apps/a/app.yaml", "apps/a/to-build", "apps/a/to-docs",
		"apps/b/.sourceignore", "apps/b/app.yaml", "apps/b/keep.md",
		"infra/db.yaml",
	}, files(t, fsys)[:7:7], "paths narrow, patterns and the tree's ignore file hide (a later ! shows again)")
	for _, hidden := range []string{"docs/guide.md", "docs", "apps/a/README.md", "apps/b/logo.png", "apps/b/build/out.yaml", "apps/b/build", "apps/a/link.png"} {
		_, err := fs.Stat(fsys, hidden)
		assert.ErrorIs(t, err, fs.ErrNotExist, hidden)
	}
	for _, link := range []string{"apps/a/to-build", "apps/a/to-docs"} {
		_, err := fs.ReadFile(fsys, link)
		assert.ErrorIs(t, err, fs.ErrNotExist, "a link does not reach what is hidden: %s", link)
	}
	root, err := fs.ReadDir(fsys, ".")
	require.NoError(t, err)
	require.Len(t, root, 2, "only the directories on the way to the paths")

	// The hash: a change of what is hidden is no change.
	t1, err := m.TreeHash(h1, sel)
	require.NoError(t, err)
	raw1, err := m.TreeHash(h1, at(""))
	require.NoError(t, err)
	assert.NotEqual(t, raw1, t1)
	step := func(msg string, changes ...gittest.Change) (plumbing.Hash, plumbing.Hash, []string) {
		c := plumbing.NewHash(repo.Commit(t, msg, changes...))
		_, err := m.FetchCommit(ctxT(t), nil, c)
		require.NoError(t, err)
		h, err := m.TreeHash(c, sel)
		require.NoError(t, err)
		before := c1
		paths, err := m.ChangedPaths(ctxT(t), plumbing.NewHash(before), c, sel)
		require.NoError(t, err)
		c1 = c.String()
		return c, h, paths
	}
	_, t2, paths := step("hidden only",
		gittest.File("docs/guide.md", "v2"), gittest.File("apps/b/logo.png", "v2"),
		gittest.File("apps/b/build/out.yaml", "v2"), gittest.File("apps/a/README.md", "v2"))
	assert.Equal(t, t1, t2, "nothing kept changed")
	assert.Empty(t, paths)
	c3, t3, paths := step("kept", gittest.File("apps/b/app.yaml", "b2"), gittest.File("docs/x.yaml", "outside"))
	assert.NotEqual(t, t2, t3)
	assert.Equal(t, []string{"apps/b/app.yaml"}, paths, "what the selection leaves out is not a changed path")
	_, t4, paths := step("the ignore file shows build/", gittest.File("apps/b/.sourceignore", "!keep.md\n"))
	assert.NotEqual(t, t3, t4)
	assert.Nil(t, paths, "an ignore file changed: what changed is unknown")
	fsys4, err := m.FS(plumbing.NewHash(c1), sel)
	require.NoError(t, err)
	assert.Contains(t, files(t, fsys4), "apps/b/build/out.yaml")

	// Hiding a file is the same as not having it: the selected hash is
	// the git hash of the tree that holds what is kept.
	_, t5, paths := step("a hidden file where nothing was hidden", gittest.File("infra/notes.md", "n"))
	assert.Equal(t, t4, t5)
	assert.Empty(t, paths)
	c6, _, _ := step("png deleted", gittest.Delete("apps/b/logo.png"))
	c7 := plumbing.NewHash(repo.Commit(t, "png back", gittest.File("apps/b/logo.png", "back")))
	_, err = m.FetchCommit(ctxT(t), nil, c7)
	require.NoError(t, err)
	filtered, err := m.TreeHash(c7, Selection{Path: "apps/b", Ignore: []string{"*.png"}})
	require.NoError(t, err)
	raw, err := m.TreeHash(c6, at("apps/b"))
	require.NoError(t, err)
	assert.Equal(t, raw, filtered, "a tree with logo.png hidden hashes as the tree without it")

	// Without IgnoreFile the tree's ignore file is an ordinary file.
	plainer := Selection{Path: "apps/b", Ignore: []string{"*.png"}}
	fsysB, err := m.FS(c3, plainer)
	require.NoError(t, err)
	assert.Equal(t, []string{".sourceignore", "app.yaml", "build/out.yaml", "keep.md"}, files(t, fsysB))
	subs, err := m.Submodules(c3, plainer)
	require.NoError(t, err)
	assert.Empty(t, subs)

	// A selection that keeps everything hashes as the tree itself.
	all, err := m.TreeHash(c3, Selection{Path: "infra", Ignore: []string{"*.png"}, Paths: []string{""}})
	require.NoError(t, err)
	rawInfra, err := m.TreeHash(c3, at("infra"))
	require.NoError(t, err)
	assert.Equal(t, rawInfra, all)

	// Paths must exist.
	_, err = m.TreeHash(c3, Selection{Paths: []string{"apps", "nope"}})
	assert.ErrorIs(t, err, ErrPathNotFound)
	_, err = m.FS(c3, Selection{Paths: []string{"nope"}})
	assert.ErrorIs(t, err, ErrPathNotFound)
}

func TestSelectionReadsOnlyWhatChanged(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/wide")
	var changes []gittest.Change
	for i := range 50 {
		changes = append(changes, gittest.File("d"+strings.Repeat("x", i%5)+"/"+string(rune('a'+i%26))+"/f.yaml", "v"))
	}
	c1 := repo.Commit(t, "wide", changes...)
	c2 := repo.Commit(t, "one file", gittest.File("dxx/c/f.yaml", "v2"))
	m, err := OpenMirror(t.TempDir(), repo.URL(), MirrorOptions{})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	sel := Selection{Ignore: []string{"*.png"}}
	_, err = m.TreeHash(plumbing.NewHash(c1), sel)
	require.NoError(t, err)
	before := m.TreesRead()
	_, err = m.TreeHash(plumbing.NewHash(c2), sel)
	require.NoError(t, err)
	// The root, the directory and its subdirectory changed; the other
	// directories are known by their hash.
	assert.LessOrEqual(t, m.TreesRead()-before, int64(3))
}

func TestSelectionRefusesHostileInput(t *testing.T) {
	for name, sel := range map[string]Selection{
		"path climbs":        {Paths: []string{"../x"}},
		"root climbs":        {Path: "a/../../x"},
		"ignore file a path": {IgnoreFile: "a/.sourceignore"},
		"ignore file dots":   {IgnoreFile: ".."},
		"NUL in a pattern":   {Ignore: []string{"a\x00b"}},
		"newline":            {Ignore: []string{"a\nb"}},
		"long pattern":       {Ignore: []string{strings.Repeat("*", maxPatternLen+1)}},
		"too many patterns":  {Ignore: make([]string, maxPatterns+1)},
		"too many paths":     {Paths: make([]string, maxSelectPaths+1)},
	} {
		assert.Error(t, sel.Validate(), name)
	}
	assert.NoError(t, Selection{Path: "a", Paths: []string{"b", "c/d"}, Ignore: []string{"!x", "/y/", "**/z"}, IgnoreFile: ".sourceignore"}.Validate())

	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/hostile")
	c := repo.Commit(t, "huge ignore file",
		gittest.File("ok.yaml", "x"),
		gittest.File("a/.sourceignore", strings.Repeat("x\n", maxIgnoreFile/2+1)),
		gittest.Symlink("b/.sourceignore", "../a/.sourceignore"),
		gittest.File("b/b.yaml", "b"))
	m, err := OpenMirror(t.TempDir(), repo.URL(), MirrorOptions{})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	sel := Selection{IgnoreFile: ".sourceignore"}
	_, err = m.TreeHash(plumbing.NewHash(c), sel)
	assert.ErrorIs(t, err, ErrInvalidSelection, "an ignore file too large to read is an error, not a silent partial read")
	assert.ErrorContains(t, err, "a/.sourceignore")
	fsys, err := m.FS(plumbing.NewHash(c), Selection{Paths: []string{"b"}, IgnoreFile: ".sourceignore"})
	require.NoError(t, err)
	assert.Equal(t, []string{"b/.sourceignore", "b/b.yaml"}, files(t, fsys), "an ignore file that is a link is not read")
	_, err = fs.ReadDir(fsys, "a")
	assert.ErrorIs(t, err, fs.ErrNotExist)
}
