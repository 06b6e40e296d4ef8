package mirror

import (
	"context"
	"io"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
)

// entries lists the directories and regular files of fsys, sorted.
func entries(t *testing.T, fsys fs.FS) []string {
	t.Helper()
	var out []string
	require.NoError(t, fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return err
		}
		if d.IsDir() {
			out = append(out, p+"/")
			return nil
		}
		out = append(out, p)
		_, err = fs.ReadFile(fsys, p)
		return err
	}))
	return out
}

// A selection applied to a checkout's files keeps what it keeps of the
// commit's tree.
func TestSelectionFSIsTheTreesSelection(t *testing.T) {
	repo := gittest.NewServer(t).NewRepo(t, "g/selfs")
	c := repo.Commit(t, "one",
		gittest.File("apps/a/app.yaml", "a"),
		gittest.File("apps/a/README.md", "readme"),
		gittest.File("apps/b/app.yaml", "b"),
		gittest.File("apps/b/logo.png", "png"),
		gittest.File("apps/b/build/out.yaml", "generated"),
		gittest.File("apps/b/.sourceignore", "# generated\nbuild/\n!keep.md\n"),
		gittest.File("apps/b/keep.md", "kept"),
		gittest.File(".sourceignore", "/infra/secret*\n"),
		gittest.File("infra/db.yaml", "db"),
		gittest.File("infra/secret.yaml", "s"),
		gittest.File("docs/guide.md", "guide"),
		gittest.File("docs/.sourceignore/x", "a directory named as the ignore file"),
		gittest.Symlink("apps/a/link.png", "app.yaml"),
	)
	m, err := Open(t.TempDir(), repo.URL(), Options{})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	h := mustHash(c)
	whole, err := m.FS(h, Selection{})
	require.NoError(t, err)
	for _, sel := range []Selection{
		{},
		{Ignore: []string{"*.png", "*.md"}, IgnoreFile: ".sourceignore"},
		{Paths: []string{"apps", "infra/db.yaml"}, Ignore: []string{"*.md"}, IgnoreFile: ".sourceignore"},
		{Path: "apps/b", IgnoreFile: ".sourceignore"},
		{Ignore: []string{"/*", "!apps/", "apps/*", "!apps/b/"}},
	} {
		want, err := m.FS(h, sel)
		require.NoError(t, err)
		got, err := sel.FS(context.Background(), whole)
		require.NoError(t, err)
		assert.Equal(t, entries(t, want), entries(t, got), "%+v", sel)
	}
}

func TestSelectionFSRefusesHostileInput(t *testing.T) {
	sel := Selection{IgnoreFile: ".sourceignore"}
	big := fstest.MapFS{".sourceignore": {Data: []byte(strings.Repeat("a\n", maxIgnoreFile))}}
	_, err := sel.FS(context.Background(), big)
	assert.ErrorIs(t, err, ErrInvalidSelection, "an ignore file past its bound")

	linked := fstest.MapFS{
		".sourceignore": {Data: []byte("x"), Mode: fs.ModeSymlink}, // a link: not read
		"x":             {Data: []byte("kept")},
	}
	got, err := sel.FS(context.Background(), linked)
	require.NoError(t, err)
	_, err = fs.Stat(got, "x")
	assert.NoError(t, err, "an ignore file that is a link is not read")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	wide := fstest.MapFS{}
	for i := range budgetCheck + 1 {
		wide[strings.Repeat("d/", 1)+string(rune('a'+i%26))+strings.Repeat("x", i/26)] = &fstest.MapFile{Data: []byte("f")}
	}
	_, err = sel.FS(ctx, wide)
	assert.ErrorIs(t, err, context.Canceled, "the walk honours ctx")

	_, err = sel.FS(context.Background(), fstest.MapFS{"a": {Data: []byte("a")}})
	require.NoError(t, err)
	got, err = sel.FS(context.Background(), fstest.MapFS{"a": {Data: []byte("a")}, "b": {Data: []byte("b")}})
	require.NoError(t, err)
	f, err := got.Open("a")
	require.NoError(t, err)
	_, seeks := f.(io.Seeker)
	assert.True(t, seeks, "a file is handed as it is")
	require.NoError(t, f.Close())
	assert.NoError(t, fstest.TestFS(got, "a", "b"))
	for _, name := range []string{"../a", "/a", "c"} {
		_, err := got.Open(name)
		assert.Error(t, err, name)
	}
}
