package mirror

import (
	"io/fs"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/dev/gittest"
)

// traced collects what a file system's trace reports.
type traced struct {
	mu    sync.Mutex
	paths []string
}

func (r *traced) add(p string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.paths = append(r.paths, p)
}

// take returns what was reported since the last take, sorted and once each.
func (r *traced) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Compact(slices.Sorted(slices.Values(r.paths)))
	r.paths = nil
	return out
}

// linkedRepo is a repository whose apps/x reads, through links, files and
// directories elsewhere: the cases of TestFSTracesWhatLinksRead.
func linkedRepo(t *testing.T) (*Mirror, gitutil.Hash) {
	t.Helper()
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	c := repo.Commit(t, "links",
		gittest.File("apps/x/plain.yaml", "plain"),
		gittest.File("apps/y/f", "y"),
		gittest.File("shared/base/cm.yaml", "base"),
		gittest.File("shared/other.yaml", "other"),
		gittest.File("shared/chained/cm.yaml", "chained"),
		gittest.File("common/values.yaml", "values"),
		gittest.Symlink("apps/x/base", "../../shared/base"),
		gittest.Symlink("apps/x/values.yaml", "../../common/values.yaml"),
		gittest.Symlink("apps/x/chain", "../../links/one"),
		gittest.Symlink("links/one", "two"),
		gittest.Symlink("links/two", "../shared/chained"),
		gittest.Symlink("links/sb", "../shared/base"),
		gittest.Symlink("apps/x/via", "../../links/sb/../other.yaml"),
		gittest.Symlink("apps/x/up", ".."),
		gittest.Symlink("apps/x/top", "../.."),
		gittest.Symlink("apps/x/escape", "../../../etc"),
		gittest.Symlink("apps/x/abs", "/etc/passwd"),
		gittest.Symlink("apps/x/dangling", "../../nowhere"),
		gittest.Symlink("apps/x/loop", "loop"),
		gittest.Symlink("shared/alias", "base"))
	m, err := Open(t.TempDir(), repo.URL(), Options{})
	require.NoError(t, err)
	_, err = m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	return m, mustHash(c)
}

// A lookup through symbolic links reports, as paths of the repository, each
// link it followed, where its target leads and what it reached; one that
// follows none reports nothing; a target that leaves the tree, names
// nothing or loops is not reported, the link that holds it is.
func TestFSTracesWhatLinksRead(t *testing.T) {
	m, c := linkedRepo(t)
	fsys, err := m.FS(c, at(""))
	require.NoError(t, err)
	rec := &traced{}
	fsys.(LinkTracer).TraceLinks(rec.add)
	rl := fsys.(fs.ReadLinkFS)

	read := func(name string) error { _, err := fs.ReadFile(fsys, name); return err }
	stat := func(name string) error { _, err := fs.Stat(fsys, name); return err }
	list := func(name string) error { _, err := fs.ReadDir(fsys, name); return err }
	lstat := func(name string) error { _, err := rl.Lstat(name); return err }
	readLink := func(name string) error { _, err := rl.ReadLink(name); return err }
	tests := []struct {
		name  string
		op    func(string) error
		path  string
		want  []string
		fails bool
	}{
		{"no link", read, "apps/x/plain.yaml", nil, false},
		{"a link not followed", lstat, "apps/x/base", nil, false},
		{"a file under a linked directory", read, "apps/x/base/cm.yaml", []string{"apps/x/base", "shared/base", "shared/base/cm.yaml"}, false},
		{"a linked directory listed", list, "apps/x/base", []string{"apps/x/base", "shared/base"}, false},
		{"a link to a file", stat, "apps/x/values.yaml", []string{"apps/x/values.yaml", "common/values.yaml"}, false},
		{"a chain of links", read, "apps/x/chain/cm.yaml", []string{"apps/x/chain", "links/one", "links/two", "shared/chained", "shared/chained/cm.yaml"}, false},
		{"'..' after where a link leads", read, "apps/x/via", []string{"apps/x/via", "links/sb", "shared/base", "shared/other.yaml"}, false},
		{"a link to a directory above", read, "apps/x/up/y/f", []string{"apps", "apps/x/up", "apps/y/f"}, false},
		{"a link to the root", list, "apps/x/top", []string{".", "apps/x/top"}, false},
		{"a link read", readLink, "apps/x/base", []string{"apps/x/base", "shared/base"}, false},
		{"a link leaving the tree", stat, "apps/x/escape", []string{"apps/x/escape"}, true},
		{"an absolute link", read, "apps/x/abs", []string{"apps/x/abs"}, true},
		{"a dangling link", stat, "apps/x/dangling", []string{"apps/x/dangling"}, true},
		{"a loop", read, "apps/x/loop", []string{"apps/x/loop"}, true},
	}
	for _, tt := range tests {
		err := tt.op(tt.path)
		if tt.fails {
			require.Error(t, err, tt.name)
		} else {
			require.NoError(t, err, tt.name)
		}
		assert.Equal(t, tt.want, rec.take(), tt.name)
	}

	fsys.(LinkTracer).TraceLinks(nil)
	require.NoError(t, read("apps/x/base/cm.yaml"))
	assert.Empty(t, rec.take(), "a trace taken off reports nothing")
}

// A file system of a path reports the paths of the repository, not its
// own names.
func TestFSTracesRepositoryPaths(t *testing.T) {
	m, c := linkedRepo(t)
	fsys, err := m.FS(c, at("shared"))
	require.NoError(t, err)
	rec := &traced{}
	fsys.(LinkTracer).TraceLinks(rec.add)
	data, err := fs.ReadFile(fsys, "alias/cm.yaml")
	require.NoError(t, err)
	assert.Equal(t, "base", string(data))
	assert.Equal(t, []string{"shared/alias", "shared/base", "shared/base/cm.yaml"}, rec.take())
}

// The trace costs a lookup that follows no link nothing.
func TestFSTraceAllocatesNothingWithoutLinks(t *testing.T) {
	m, c := linkedRepo(t)
	fsys, err := m.FS(c, at(""))
	require.NoError(t, err)
	stat := func() {
		_, err := fs.Stat(fsys, "apps/x/plain.yaml")
		require.NoError(t, err)
	}
	plain := testing.AllocsPerRun(20, stat)
	rec := &traced{}
	fsys.(LinkTracer).TraceLinks(rec.add)
	assert.Equal(t, plain, testing.AllocsPerRun(20, stat))
	assert.Empty(t, rec.take())
}
