package mirror

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/dev/gittest"
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
	m, err := Open(t.TempDir(), repo.URL(), Options{})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	h1 := mustHash(c1)

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
	t1, err := m.TreeHash(ctxT(t), h1, sel)
	require.NoError(t, err)
	raw1, err := m.TreeHash(ctxT(t), h1, at(""))
	require.NoError(t, err)
	assert.NotEqual(t, raw1, t1)
	step := func(msg string, changes ...gittest.Change) (gitutil.Hash, gitutil.Hash, []string) {
		c := mustHash(repo.Commit(t, msg, changes...))
		_, err := m.FetchCommit(ctxT(t), nil, c)
		require.NoError(t, err)
		h, err := m.TreeHash(ctxT(t), c, sel)
		require.NoError(t, err)
		before := c1
		paths, err := m.ChangedPaths(ctxT(t), mustHash(before), c, sel)
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
	fsys4, err := m.FS(mustHash(c1), sel)
	require.NoError(t, err)
	assert.Contains(t, files(t, fsys4), "apps/b/build/out.yaml")

	// Hiding a file is the same as not having it: the selected hash is
	// the git hash of the tree that holds what is kept.
	_, t5, paths := step("a hidden file where nothing was hidden", gittest.File("infra/notes.md", "n"))
	assert.Equal(t, t4, t5)
	assert.Empty(t, paths)
	c6, _, _ := step("png deleted", gittest.Delete("apps/b/logo.png"))
	c7 := mustHash(repo.Commit(t, "png back", gittest.File("apps/b/logo.png", "back")))
	_, err = m.FetchCommit(ctxT(t), nil, c7)
	require.NoError(t, err)
	filtered, err := m.TreeHash(ctxT(t), c7, Selection{Path: "apps/b", Ignore: []string{"*.png"}})
	require.NoError(t, err)
	raw, err := m.TreeHash(ctxT(t), c6, at("apps/b"))
	require.NoError(t, err)
	assert.Equal(t, raw, filtered, "a tree with logo.png hidden hashes as the tree without it")

	// Without IgnoreFile the tree's ignore file is an ordinary file.
	plainer := Selection{Path: "apps/b", Ignore: []string{"*.png"}}
	fsysB, err := m.FS(c3, plainer)
	require.NoError(t, err)
	assert.Equal(t, []string{".sourceignore", "app.yaml", "build/out.yaml", "keep.md"}, files(t, fsysB))
	subs, err := m.Submodules(ctxT(t), c3, plainer)
	require.NoError(t, err)
	assert.Empty(t, subs)

	// A selection that keeps everything hashes as the tree itself.
	all, err := m.TreeHash(ctxT(t), c3, Selection{Path: "infra", Ignore: []string{"*.png"}, Paths: []string{""}})
	require.NoError(t, err)
	rawInfra, err := m.TreeHash(ctxT(t), c3, at("infra"))
	require.NoError(t, err)
	assert.Equal(t, rawInfra, all)

	// Paths must exist.
	_, err = m.TreeHash(ctxT(t), c3, Selection{Paths: []string{"apps", "nope"}})
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
	m, err := Open(t.TempDir(), repo.URL(), Options{})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	sel := Selection{Ignore: []string{"*.png"}}
	_, err = m.TreeHash(ctxT(t), mustHash(c1), sel)
	require.NoError(t, err)
	before := m.TreesRead()
	_, err = m.TreeHash(ctxT(t), mustHash(c2), sel)
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
	m, err := Open(t.TempDir(), repo.URL(), Options{})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	sel := Selection{IgnoreFile: ".sourceignore"}
	_, err = m.TreeHash(ctxT(t), mustHash(c), sel)
	assert.ErrorIs(t, err, ErrInvalidSelection, "an ignore file too large to read is an error, not a silent partial read")
	assert.ErrorContains(t, err, "a/.sourceignore")
	fsys, err := m.FS(mustHash(c), Selection{Paths: []string{"b"}, IgnoreFile: ".sourceignore"})
	require.NoError(t, err)
	assert.Equal(t, []string{"b/.sourceignore", "b/b.yaml"}, files(t, fsys), "an ignore file that is a link is not read")
	_, err = fs.ReadDir(fsys, "a")
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

// hostileIgnores is a repository of nine nested directories, each with a
// .sourceignore of 1,000 patterns of 1,000 bytes that match nothing (1 MiB,
// within every limit) and 300 files: each file is matched against every
// pattern above it.
func hostileIgnores(t testing.TB) (*Mirror, gitutil.Hash) {
	t.Helper()
	m, c, _ := hostileRepo(t)
	return m, c
}

// hostileRepo is hostileIgnores, with the repository.
func hostileRepo(t testing.TB) (*Mirror, gitutil.Hash, *gittest.Repo) {
	t.Helper()
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/hostile")
	var b strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&b, "*%0999d\n", i)
	}
	var changes []gittest.Change
	dir := ""
	for d := range 9 {
		dir += fmt.Sprintf("d%d/", d)
		changes = append(changes, gittest.File(dir+".sourceignore", b.String()))
		for f := range 300 {
			changes = append(changes, gittest.File(fmt.Sprintf("%sf%03d.yaml", dir, f), "x"))
		}
	}
	c := mustHash(repo.Commit(t, "hostile", changes...))
	m, err := Open(t.TempDir(), repo.URL(), Options{})
	require.NoError(t, err)
	_, err = m.Fetch(context.Background(), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	return m, c, repo
}

// Ignore files within every limit can still cost minutes to evaluate; a
// budget ends the evaluation with an error that says so (the target's,
// not the mirror's), and a cancel that lands inside it is honoured at the
// next look at ctx.
func TestIgnorePatternsHaveABudget(t *testing.T) {
	m, c := hostileIgnores(t)
	sel := Selection{IgnoreFile: ".sourceignore"}
	start := time.Now()
	_, err := m.TreeHash(ctxT(t), c, sel)
	require.ErrorIs(t, err, ErrSelectionBudget)
	require.ErrorIs(t, err, ErrInvalidSelection)
	t.Logf("TreeHash over its budget after %v", time.Since(start))
	assert.NoError(t, m.damage(err), "the selection's error, not damage")
	assert.True(t, m.HasCommit(c), "the mirror is whole")
	trees := m.TreesRead()
	_, again := m.TreeHash(ctxT(t), c, sel)
	assert.Equal(t, err, again, "the next poll is refused at once")
	assert.Equal(t, trees, m.TreesRead(), "without evaluating it again")

	fsys, err := m.FS(c, sel)
	require.NoError(t, err)
	_, err = fs.ReadDir(fsys, "d0/d1/d2/d3/d4/d5/d6/d7/d8")
	require.ErrorIs(t, err, ErrSelectionBudget, "each operation of the file system has the budget")
	_, err = m.Submodules(ctxT(t), c, sel)
	require.NoError(t, err, "no .gitmodules: nothing to evaluate")

	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	done := make(chan error, 1)
	trees = m.TreesRead()
	go func() {
		_, err := m.TreeHash(ctx, c, Selection{IgnoreFile: ".sourceignore", Ignore: []string{"another/"}})
		done <- err
	}()
	for m.TreesRead() < trees+5 { // well inside: five directories down
		runtime.Gosched()
	}
	cancel()
	cancelled := time.Now()
	err = <-done
	require.ErrorIs(t, err, context.Canceled)
	t.Logf("a cancel inside the evaluation returned after %v", time.Since(cancelled))
}

// flipContext is a context whose Err is Canceled from its flip-th call on.
type flipContext struct {
	context.Context
	calls, flip int
}

func (c *flipContext) Err() error {
	c.calls++
	if c.calls >= c.flip {
		return context.Canceled
	}
	return nil
}

// The budget looks at ctx at least every budgetCheck units (and one
// match): a cancel landing anywhere is seen within that much work, and
// ends the evaluation there. Past selectWork it ends it too.
func TestBudgetLooksAtCtx(t *testing.T) {
	ctx := &flipContext{Context: context.Background(), flip: 20}
	b := newBudget(ctx)
	const match = 63 * 10 // a 1,000-byte pattern against a path of 10 elements
	var err error
	calls, lastLook, widest := 0, int64(0), int64(0)
	for err == nil {
		err = b.spend(match)
		if ctx.calls != calls {
			calls, widest, lastLook = ctx.calls, max(widest, b.spent-lastLook), b.spent
		}
	}
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, ctx.flip, ctx.calls, "ended at the look that saw the cancel")
	assert.LessOrEqual(t, widest, int64(budgetCheck+match), "work between two looks at ctx")

	b = newBudget(context.Background())
	for err = nil; err == nil; {
		err = b.spend(match)
	}
	require.ErrorIs(t, err, ErrSelectionBudget)
	assert.LessOrEqual(t, b.spent, int64(selectWork+match))
}

// BenchmarkSelectionWork reports what a unit of the selection budget
// costs: on the hostile ignore files, and on a usual .sourceignore over a
// wide tree. The budget's comment states the figures.
func BenchmarkSelectionWork(b *testing.B) {
	b.Run("hostile", func(b *testing.B) {
		m, c := hostileIgnores(b)
		sel := Selection{IgnoreFile: ".sourceignore"}
		for b.Loop() {
			m.selected = nil
			if _, err := m.TreeHash(context.Background(), c, sel); !errors.Is(err, ErrSelectionBudget) {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/selectWork, "ns/unit")
	})
	b.Run("usual", func(b *testing.B) {
		srv := gittest.NewServer(b)
		repo := srv.NewRepo(b, "g/usual")
		var ignore strings.Builder
		for _, p := range []string{"*.png", "*.jpg", "docs/", "/tmp", "**/testdata/**", "*.md", "!README.md", ".github/", "vendor/", "*.tgz"} {
			ignore.WriteString(p + "\n")
		}
		changes := []gittest.Change{gittest.File(".sourceignore", ignore.String())}
		for i := range 10_000 {
			changes = append(changes, gittest.File(fmt.Sprintf("apps/a%02d/b%02d/f%02d.yaml", i/1000, i/100%10, i%100), "x"))
		}
		c := mustHash(repo.Commit(b, "usual", changes...))
		m, err := Open(b.TempDir(), repo.URL(), Options{})
		require.NoError(b, err)
		_, err = m.Fetch(context.Background(), nil, []string{"refs/heads/main"})
		require.NoError(b, err)
		sel := Selection{IgnoreFile: ".sourceignore"}
		var spent int64
		for b.Loop() {
			m.selected = nil
			s, err := sel.compile()
			require.NoError(b, err)
			ev, h, root, err := m.startSelection(context.Background(), plumbing.Hash(c), s)
			require.NoError(b, err)
			_, err = ev.selectedHash(s, h, root, nil, s.base())
			require.NoError(b, err)
			ev.end()
			spent = ev.b.spent
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(spent), "ns/unit")
		b.ReportMetric(float64(spent), "units/tree")
	})
}
