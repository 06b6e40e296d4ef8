package fluxartifact

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/mirror"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
)

// listing is every directory (with a slash) and file of fsys, sorted.
func listing(t *testing.T, fsys fs.FS) []string {
	t.Helper()
	var out []string
	require.NoError(t, fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == "." {
			return err
		}
		if d.IsDir() {
			p += "/"
		}
		out = append(out, p)
		return nil
	}))
	return out
}

func includeBase() fstest.MapFS {
	return fstest.MapFS{
		"deploy/app.yaml": {Data: []byte("app")},
		"README.md":       {Data: []byte("readme")},
		"link":            {Data: []byte("deploy"), Mode: fs.ModeSymlink},
	}
}

func includedTree() fstest.MapFS {
	return fstest.MapFS{
		"a.yaml":        {Data: []byte("a")},
		"sub/b.yaml":    {Data: []byte("b")},
		"sub/c.skip":    {Data: []byte("c")},
		".sourceignore": {Data: []byte("*.skip\n")},
	}
}

// An include goes where a rename would put it in a checkout, and fails
// where a rename fails: the selection then applies to the whole.
func TestAnIncludeIsPutWhereARenameWouldPutIt(t *testing.T) {
	o := newOverlay(includeBase())
	require.NoError(t, o.put(includedTree(), ".", "vendor/base"))
	require.NoError(t, o.put(includedTree(), "a.yaml", "README.md"), "a file replaces a file")
	require.NoError(t, o.put(fstest.MapFS{"empty": {Mode: fs.ModeDir | 0o755}}, "empty", "vendor/empty"))
	require.ErrorIs(t, o.put(includedTree(), "sub", "vendor/empty"), fs.ErrExist, "not even an empty directory is replaced, as by Go's os.Rename")
	sel := mirror.Selection{Ignore: []string{"/link"}, IgnoreFile: ".sourceignore"}
	got, err := sel.FS(context.Background(), o)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"README.md", "deploy/", "deploy/app.yaml",
		"vendor/", "vendor/base/", "vendor/base/.sourceignore", "vendor/base/a.yaml", "vendor/base/sub/", "vendor/base/sub/b.yaml",
		"vendor/empty/",
	}, listing(t, got), "the included .sourceignore hides in its own folder only")
	data, err := fs.ReadFile(got, "README.md")
	require.NoError(t, err)
	assert.Equal(t, "a", string(data))

	for _, tc := range []struct{ from, to, err string }{
		{".", "deploy", "file already exists"},
		{".", ".", "file already exists"},
		{".", ".git", "file already exists"},
		{".", "vendor/base", "file already exists"},
		{".", "vendor", "file already exists"},
		{".", "README.md", "not a directory"},
		{"a.yaml", "deploy", "file already exists"},
		{"a.yaml", "vendor/base/a.yaml", ""},
		{".", "vendor/base/a.yaml/x", "not a directory"},
		{".", "README.md/x", "not a directory"},
		{".", "link/x", "symbolic link"},
		{"a.yaml", "link", "symbolic link"},
		{"missing", "x", "file does not exist"},
	} {
		o := newOverlay(includeBase())
		require.NoError(t, o.put(includedTree(), ".", "vendor/base"))
		err := o.put(includedTree(), tc.from, tc.to)
		if tc.err == "" {
			assert.NoError(t, err, "%s to %s", tc.from, tc.to)
			continue
		}
		assert.ErrorContains(t, err, tc.err, "%s to %s", tc.from, tc.to)
		if !strings.Contains(tc.to, "link") && tc.to != ".git" {
			assert.Equal(t, renameOnDisk(t, includeBase(), tc.from, tc.to) != nil, err != nil, "as on disk: %s to %s", tc.from, tc.to)
		}
	}
	for _, name := range []string{"../x", "/x", "vendor/../x"} {
		_, err := o.Open(name)
		assert.ErrorIs(t, err, fs.ErrInvalid, name)
	}
	assert.Equal(t, ".", cleanRel(""))
	assert.Equal(t, "x", cleanRel("../../x"), "as securejoin: .. stops at the top")
	assert.Equal(t, "a/b", cleanRel("/a/./c/../b/"))
}

// archiveOf is an artifact of files (name to content; a name ending in
// "/" a directory), as this sink packs one.
func archiveOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	m := fstest.MapFS{}
	for name, data := range files {
		if d, ok := strings.CutSuffix(name, "/"); ok {
			m[d] = &fstest.MapFile{Mode: fs.ModeDir | 0o755}
			continue
		}
		m[name] = &fstest.MapFile{Data: []byte(data), Mode: 0o644}
	}
	var buf bytes.Buffer
	require.NoError(t, writeArchive(context.Background(), &buf, m))
	return buf.Bytes()
}

// rawArchive is a gzipped tar of the headers given, each followed by its
// content.
func rawArchive(t *testing.T, entries ...tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, h := range entries {
		require.NoError(t, tw.WriteHeader(&h))
		if h.Typeflag == tar.TypeReg && h.Size < 1<<20 {
			_, err := tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
			require.NoError(t, err)
		}
	}
	_ = tw.Flush()
	require.NoError(t, gz.Close())
	return buf.Bytes()
}

// includeSink is a sink with the GitRepository ns/app, and the artifact
// of ns/base stored as data.
func includeSink(t *testing.T, data []byte) (*Sink, *dynfake.FakeDynamicClient, payload.Artifact) {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
		"metadata": map[string]any{"namespace": "ns", "name": "app", "uid": "u1", "generation": int64(1)},
		"spec": map[string]any{"url": "https://example.com/x.git", "interval": "1m", "ref": map[string]any{"branch": "main"},
			"include": []any{map[string]any{"repository": map[string]any{"name": "base"}, "toPath": "vendor"}}}}}
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{gitRepos: "GitRepositoryList"}, u)
	storage := t.TempDir()
	s, err := New(dyn, Config{Storage: storage, Address: "h"})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	p := "gitrepository/ns/base/" + strings.Repeat("ab", 20) + ".tar.gz"
	require.NoError(t, os.MkdirAll(filepath.Join(storage, filepath.Dir(p)), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(storage, p), data, 0o600))
	sum := sha256.Sum256(data)
	return s, dyn, payload.Artifact{Path: p, URL: "http://h/" + p, Revision: "main@sha1:" + strings.Repeat("ab", 20),
		Digest: "sha256:" + hex.EncodeToString(sum[:]), LastUpdateTime: "2026-12-06T00:00:00Z", Size: int64(len(data))}
}

func includeChange(art payload.Artifact, root fs.FS) watcher.Change {
	repo := payload.GitRepository{APIVersion: "source.toolkit.fluxcd.io/v1", Namespace: "ns", Name: "app", UID: "u1", Generation: 1,
		Includes: []payload.GitRepositoryInclude{{Name: "base", ToPath: "vendor", Artifact: art}}}
	return watcher.Change{Target: watcher.Target{ID: "flux/ns/app", Payload: repo, Ignore: []string{".git/"}, IgnoreFile: ".sourceignore"},
		Ref: "refs/heads/main", To: gitutil.Hash{7}, Root: root, FS: root}
}

// An included artifact is read from the sink's storage, checked against
// its digest, and put in; the status names it.
func TestAnIncludedArtifactIsPutIn(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	s, dyn, art := includeSink(t, archiveOf(t, map[string]string{"base.yaml": "b", "more/": "", "more/x.yaml": "x"}))
	require.NoError(t, s.Deliver(context.Background(), includeChange(art, fstest.MapFS{"app.yaml": {Data: []byte("a")}})))
	u, files := stored(t, s, dyn)
	assert.Equal(t, []string{"app.yaml", "vendor/", "vendor/base.yaml", "vendor/more/", "vendor/more/x.yaml"}, files)
	included, _, _ := unstructured.NestedSlice(u.Object, "status", "includedArtifacts")
	require.Len(t, included, 1)
	assert.Equal(t, art.Digest, included[0].(map[string]any)["digest"])
	observed, _, _ := unstructured.NestedSlice(u.Object, "status", "observedInclude")
	assert.Len(t, observed, 1)
	left, _ := os.ReadDir(tmp)
	assert.Empty(t, left, "what was unpacked is removed")
}

// What an include reads is checked: this sink's own artifact of that
// GitRepository, whole, of its digest, of directories and files inside
// it, within bounds; each failure is said, as source-controller says it.
func TestAnIncludedArtifactIsChecked(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	good := archiveOf(t, map[string]string{"base.yaml": "b"})
	root := fstest.MapFS{"app.yaml": {Data: []byte("a")}, "vendor/x": {Data: []byte("in the way")}}
	for _, tc := range []struct {
		name   string
		data   []byte
		edit   func(*payload.Artifact)
		root   fs.FS
		err    string
		reason string
	}{
		{"another digest", good, func(a *payload.Artifact) { a.Digest = "sha256:" + strings.Repeat("0", 64) }, nil, "has digest", reasonCopyFailure},
		{"another namespace's", good, func(a *payload.Artifact) { a.Path = strings.Replace(a.Path, "/ns/", "/other/", 1) }, nil, "is not one this sink stores", reasonCopyFailure},
		{"a path out", good, func(a *payload.Artifact) { a.Path = "gitrepository/ns/base/../../../../etc/passwd" }, nil, "is not one this sink stores", reasonCopyFailure},
		{"not an artifact's name", good, func(a *payload.Artifact) { a.Path = "gitrepository/ns/base/latest.tar.gz" }, nil, "is not one this sink stores", reasonCopyFailure},
		{"gone", good, func(a *payload.Artifact) { a.Path = "gitrepository/ns/base/" + strings.Repeat("cd", 20) + ".tar.gz" }, nil, "no such file", reasonCopyFailure},
		{"a link inside", rawArchive(t, tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}), nil, nil, "neither a directory nor a regular file", reasonCopyFailure},
		{"a name out", rawArchive(t, tar.Header{Name: "../../x", Typeflag: tar.TypeReg, Size: 1, Mode: 0o600}), nil, nil, "not a path inside", reasonCopyFailure},
		{"an absolute name", rawArchive(t, tar.Header{Name: "/x", Typeflag: tar.TypeReg, Size: 1, Mode: 0o600}), nil, nil, "not a path inside", reasonCopyFailure},
		{"too large", rawArchive(t, tar.Header{Name: "x", Typeflag: tar.TypeReg, Size: maxIncludeBytes + 1, Mode: 0o600}), nil, nil, "more than", reasonCopyFailure},
		{"twice the same name", rawArchive(t, tar.Header{Name: "x", Typeflag: tar.TypeReg, Size: 1, Mode: 0o600}, tar.Header{Name: "x", Typeflag: tar.TypeReg, Size: 1, Mode: 0o600}), nil, nil, "file exists", reasonCopyFailure},
		{"not gzip", []byte("not an archive"), nil, nil, "gzip", reasonCopyFailure},
		{"in the way", good, nil, root, "file already exists", reasonCopyFailure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _, art := includeSink(t, tc.data)
			if tc.edit != nil {
				tc.edit(&art)
			}
			r := tc.root
			if r == nil {
				r = fstest.MapFS{"app.yaml": {Data: []byte("a")}}
			}
			err := s.Deliver(context.Background(), includeChange(art, r))
			require.ErrorContains(t, err, tc.err)
			assert.False(t, watcher.IsPermanent(err), "tried again: the include may change")
			s.failures.mu.Lock()
			f := s.failures.pending["ns/app"]
			s.failures.mu.Unlock()
			assert.Equal(t, tc.reason, f.reason)
			want, _, _ := failureConditions(f)
			assert.Contains(t, want, "StorageOperationFailed")
			stored, _ := filepath.Glob(filepath.Join(s.cfg.Storage, "gitrepository/ns/app/*"))
			assert.Empty(t, stored, "nothing stored")
		})
	}
	left, _ := os.ReadDir(tmp)
	assert.Empty(t, left, "what was unpacked is removed")
}

// The conditions of an include that is not there yet are Flux's:
// IncludeUnavailable, the fetch having worked.
func TestAnIncludeUnavailableIsSaidSo(t *testing.T) {
	for _, reason := range []string{"NotFound", "NoArtifact"} {
		want, order, drop := failureConditions(failure{reason: reason, message: "m"})
		assert.Equal(t, "True", want["IncludeUnavailable"]["status"])
		assert.True(t, slices.Contains(order, "IncludeUnavailable"))
		assert.True(t, drop("FetchFailed", map[string]any{"status": "True"}))
	}
}

// Flux's sparseCheckout narrows the checkout the includes are put into:
// an include goes where its toPath says, outside the paths too.
func TestAnIncludeIsPutIntoASparseCheckout(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	s, dyn, art := includeSink(t, archiveOf(t, map[string]string{"base.yaml": "b"}))
	c := includeChange(art, fstest.MapFS{"app/app.yaml": {Data: []byte("a")}, "other/x": {Data: []byte("x")}, "vendor/y": {Data: []byte("y")}})
	c.Target.Paths = []string{"app"}
	require.NoError(t, s.Deliver(context.Background(), c), "vendor/ is not in the sparse checkout: not in the way")
	_, files := stored(t, s, dyn)
	assert.Equal(t, []string{"app/", "app/app.yaml", "vendor/", "vendor/base.yaml"}, files)
}

// A path past its bounds is refused before anything is read or made: a
// deep toPath would make a directory for each of its elements.
func TestAnIncludesPathsAreBounded(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	for _, edit := range []func(*payload.GitRepositoryInclude){
		func(i *payload.GitRepositoryInclude) {
			i.ToPath = strings.Repeat("a/", payload.MaxIncludePathElems) + "a"
		},
		func(i *payload.GitRepositoryInclude) { i.FromPath = strings.Repeat("a", payload.MaxIncludePath+1) },
		func(i *payload.GitRepositoryInclude) { i.ToPath = "a\x00b" },
	} {
		s, _, art := includeSink(t, archiveOf(t, map[string]string{"base.yaml": "b"}))
		c := includeChange(art, fstest.MapFS{"app.yaml": {Data: []byte("a")}})
		repo := c.Target.Payload.(payload.GitRepository)
		edit(&repo.Includes[0])
		c.Target.Payload = repo
		err := s.Deliver(context.Background(), c)
		require.ErrorIs(t, err, payload.ErrInvalid)
		s.failures.mu.Lock()
		assert.Equal(t, reasonIllegalPath, s.failures.pending["ns/app"].reason)
		s.failures.mu.Unlock()
	}
}

// The overlay, and a selection of it, are file systems as io/fs has them.
func TestTheOverlayIsAFileSystem(t *testing.T) {
	o := newOverlay(fstest.MapFS{"deploy/app.yaml": {Data: []byte("a")}})
	require.NoError(t, o.put(fstest.MapFS{"sub/orig.yaml": {Data: []byte("b")}}, "sub/orig.yaml", "deploy/renamed.yaml"))
	require.NoError(t, o.put(fstest.MapFS{"d/x": {Data: []byte("x")}}, "d", "new/dir"))
	f, err := o.Open("deploy/renamed.yaml")
	require.NoError(t, err)
	fi, err := f.Stat()
	require.NoError(t, err)
	require.NoError(t, f.Close())
	assert.Equal(t, "renamed.yaml", fi.Name())
	assert.NoError(t, fstest.TestFS(o, "deploy/app.yaml", "deploy/renamed.yaml", "new/dir/x"))
	sel, err := mirror.Selection{}.FS(context.Background(), o)
	require.NoError(t, err)
	assert.NoError(t, fstest.TestFS(sel, "deploy/app.yaml", "deploy/renamed.yaml", "new/dir/x"))
}

// stored is ns/app, and what its artifact holds.
func stored(t *testing.T, s *Sink, dyn *dynfake.FakeDynamicClient) (*unstructured.Unstructured, []string) {
	t.Helper()
	u, err := dyn.Resource(gitRepos).Namespace("ns").Get(context.Background(), "app", metav1.GetOptions{})
	require.NoError(t, err)
	p, _, _ := unstructured.NestedString(u.Object, "status", "artifact", "path")
	f, err := os.Open(filepath.Join(s.cfg.Storage, p))
	require.NoError(t, err)
	defer f.Close()
	dir := filepath.Join(t.TempDir(), "x")
	require.NoError(t, untar(context.Background(), f, dir, &unpackBudget{bytes: 1 << 20, entries: 1 << 10}))
	return u, listing(t, os.DirFS(dir))
}

// renameOnDisk does what source-controller does on disk: base written out
// as a checkout, with includedTree put at vendor/base first, then from
// (of includedTree, unpacked) at to, with os.MkdirAll and os.Rename.
func renameOnDisk(t *testing.T, base fstest.MapFS, from, to string) error {
	t.Helper()
	disk := t.TempDir()
	write := func(dir string, m fstest.MapFS) {
		for name, f := range m {
			if f.Mode&fs.ModeSymlink != 0 {
				continue
			}
			p := filepath.Join(disk, dir, name)
			require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
			require.NoError(t, os.WriteFile(p, f.Data, 0o644))
		}
	}
	write("checkout", base)
	write("first", includedTree())
	write("second", includedTree())
	checkout := filepath.Join(disk, "checkout")
	require.NoError(t, os.MkdirAll(filepath.Join(checkout, "vendor"), 0o755))
	require.NoError(t, os.Rename(filepath.Join(disk, "first"), filepath.Join(checkout, "vendor/base")))
	dst := filepath.Join(checkout, to)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.Rename(filepath.Join(disk, "second", from), dst)
}

// One budget is shared by all the includes of a delivery: entries and
// bytes of one are not there for the next.
func TestTheIncludesShareABudget(t *testing.T) {
	archive := rawArchive(t, tar.Header{Name: "d", Typeflag: tar.TypeDir, Mode: 0o700}, tar.Header{Name: "d/f", Typeflag: tar.TypeReg, Size: 10, Mode: 0o600})
	for _, tc := range []struct {
		budget unpackBudget
		err    string
	}{
		{unpackBudget{bytes: 20, entries: 4}, ""},
		{unpackBudget{bytes: 20, entries: 3}, "entries included"},
		{unpackBudget{bytes: 19, entries: 4}, "bytes included"},
	} {
		b := tc.budget
		var err error
		for i := range 2 {
			if err = untar(context.Background(), bytes.NewReader(archive), filepath.Join(t.TempDir(), strconv.Itoa(i)), &b); err != nil {
				break
			}
		}
		if tc.err == "" {
			assert.NoError(t, err, "%+v", tc.budget)
			continue
		}
		assert.ErrorContains(t, err, tc.err, "%+v", tc.budget)
	}
}

// A link in a sparse checkout is a link still: an include is not put
// through it, as in the whole checkout.
func TestASparseCheckoutKeepsItsLinks(t *testing.T) {
	root := fstest.MapFS{"app/app.yaml": {Data: []byte("a")}, "app/dir/y": {Data: []byte("y")},
		"app/link": {Data: []byte("dir"), Mode: fs.ModeSymlink}}
	inc := fstest.MapFS{"x": {Data: []byte("x")}}
	for _, sel := range []mirror.Selection{{}, {Paths: []string{"app"}}} {
		base, err := sparse(context.Background(), root, sel)
		require.NoError(t, err)
		assert.ErrorContains(t, newOverlay(base).put(inc, "x", "app/link/x"), "symbolic link", "%+v", sel)
	}
}
