package fluxartifact

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/modwatch/modwatch/gitutil"
)

func newStorage(t *testing.T, records int, ttl time.Duration) (*storage, string) {
	t.Helper()
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	require.NoError(t, err)
	t.Cleanup(func() { _ = root.Close() })
	return &storage{root: root, records: records, ttl: ttl}, dir
}

// An artifact is stored whole under its object's folder, latest.tar.gz
// links to it, and its digest and size are the file's.
func TestAnArtifactIsStoredWhole(t *testing.T) {
	s, dir := newStorage(t, 2, time.Minute)
	a, err := s.store(context.Background(), "gitrepository/ns/app", "c1.tar.gz", fstest.MapFS{"f": {Data: []byte("x")}})
	require.NoError(t, err)
	assert.Equal(t, "gitrepository/ns/app/c1.tar.gz", a.Path)
	data, err := os.ReadFile(filepath.Join(dir, a.Path))
	require.NoError(t, err)
	sum := sha256.Sum256(data)
	assert.Equal(t, "sha256:"+hex.EncodeToString(sum[:]), a.Digest)
	assert.Equal(t, int64(len(data)), a.Size)
	link, err := os.Readlink(filepath.Join(dir, "gitrepository/ns/app/latest.tar.gz"))
	require.NoError(t, err)
	assert.Equal(t, "c1.tar.gz", link)
	names := func() []string {
		es, err := os.ReadDir(filepath.Join(dir, "gitrepository/ns/app"))
		require.NoError(t, err)
		var out []string
		for _, e := range es {
			out = append(out, e.Name())
		}
		return out
	}
	assert.Equal(t, []string{"c1.tar.gz", "latest.tar.gz"}, names(), "no temporary file left")

	// One that fails leaves nothing, and the last stays the latest.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = s.store(ctx, "gitrepository/ns/app", "c2.tar.gz", fstest.MapFS{"f": {Data: []byte("y")}})
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, []string{"c1.tar.gz", "latest.tar.gz"}, names())
}

// Old artifacts go as source-controller's go: those past the TTL, then the
// oldest until the count remains; never the current one, the link, or
// what is not an artifact.
func TestOldArtifactsAreCollectedAsSourceControllerCollectsThem(t *testing.T) {
	now := time.Now()
	for name, tc := range map[string]struct {
		records int
		ttl     time.Duration
		ages    map[string]time.Duration // name → age
		current string
		want    []string
	}{
		"within the TTL, over the count: the oldest go": {2, time.Hour,
			map[string]time.Duration{"a.tar.gz": 3 * time.Minute, "b.tar.gz": 2 * time.Minute, "c.tar.gz": time.Minute}, "c.tar.gz",
			[]string{"b.tar.gz", "c.tar.gz"}},
		"past the TTL: gone, under the count too": {5, time.Minute,
			map[string]time.Duration{"a.tar.gz": 3 * time.Minute, "b.tar.gz": 10 * time.Second}, "b.tar.gz",
			[]string{"b.tar.gz"}},
		"the current one stays, however old": {1, time.Minute,
			map[string]time.Duration{"a.tar.gz": time.Hour, "b.tar.gz": time.Second}, "a.tar.gz",
			[]string{"a.tar.gz"}},
		"not artifacts: left alone": {1, time.Minute,
			map[string]time.Duration{"a.tar.gz": time.Hour, "notes.txt": time.Hour, ".x.tar.gz.tmp": time.Hour, "c.tar.gz": 0}, "c.tar.gz",
			[]string{".x.tar.gz.tmp", "c.tar.gz", "notes.txt"}},
	} {
		t.Run(name, func(t *testing.T) {
			s, dir := newStorage(t, tc.records, tc.ttl)
			obj := filepath.Join(dir, "gitrepository", "ns", "app")
			require.NoError(t, os.MkdirAll(obj, 0o755))
			for f, age := range tc.ages {
				p := filepath.Join(obj, f)
				require.NoError(t, os.WriteFile(p, []byte(f), 0o644))
				require.NoError(t, os.Chtimes(p, now.Add(-age), now.Add(-age)))
			}
			require.NoError(t, os.Symlink(tc.current, filepath.Join(obj, latest)))
			require.NoError(t, s.collect("gitrepository/ns/app", tc.current, now))
			es, err := os.ReadDir(obj)
			require.NoError(t, err)
			var got []string
			for _, e := range es {
				if e.Name() != latest {
					got = append(got, e.Name())
				}
			}
			assert.Equal(t, tc.want, got)
			_, err = os.Lstat(filepath.Join(obj, latest))
			assert.NoError(t, err, "the link stays")
		})
	}
}

// The server serves artifacts and nothing else.
func TestTheServerServesArtifactsOnly(t *testing.T) {
	s, dir := newStorage(t, 2, time.Minute)
	a, err := s.store(context.Background(), "gitrepository/ns/app", "c1.tar.gz", fstest.MapFS{"f": {Data: []byte("x")}})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "gitrepository/ns/app/.c2.tar.gz.tmp"), []byte("partial"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "secret.tar.gz"), []byte("outside the kind"), 0o644))
	outside := filepath.Join(t.TempDir(), "x.tar.gz")
	require.NoError(t, os.WriteFile(outside, []byte("elsewhere"), 0o644))
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "gitrepository/ns/app/escape.tar.gz")))
	srv := httptest.NewServer(s.handler())
	defer srv.Close()
	get := func(method, p string) int {
		req, err := http.NewRequest(method, srv.URL+p, nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, 200, get("GET", "/"+a.Path))
	assert.Equal(t, 200, get("HEAD", "/"+a.Path))
	assert.Equal(t, 200, get("GET", "/gitrepository/ns/app/latest.tar.gz"))
	for _, p := range []string{"/", "/gitrepository/", "/gitrepository/ns/app/", "/gitrepository/ns/app",
		"/gitrepository/ns/app/.c2.tar.gz.tmp", "/secret.tar.gz", "/gitrepository/../secret.tar.gz",
		"/gitrepository/ns/app/escape.tar.gz", "/gitrepository/ns/app/missing.tar.gz"} {
		assert.Equal(t, 404, get("GET", p), p)
	}
	assert.Equal(t, 405, get("PUT", "/"+a.Path))
	assert.Equal(t, 405, get("DELETE", "/"+a.Path))
}

// An object's folder is one folder under the kind's: its namespace and
// name are checked as the apiserver checks them.
func TestAnObjectsFolderStaysUnderTheKind(t *testing.T) {
	dir, err := objectDir("flux-system", "podinfo.v2")
	require.NoError(t, err)
	assert.Equal(t, "gitrepository/flux-system/podinfo.v2", dir)
	for _, bad := range [][2]string{{"..", "x"}, {"ns", ".."}, {"ns", "a/b"}, {"a/b", "n"}, {"", "n"}, {"ns", ""}, {"NS", "n"}, {"ns", "x\x00"}, {"a.b", "n"}} {
		_, err := objectDir(bad[0], bad[1])
		assert.Error(t, err, "%q", bad)
	}
}

// The revision is source-controller's.
func TestTheRevisionIsSourceControllers(t *testing.T) {
	h := gitutil.Hash{0xab}
	sha := "sha1:" + h.String()
	gr := func(ref map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{}}}
		if ref != nil {
			_ = unstructured.SetNestedMap(u.Object, ref, "spec", "ref")
		}
		return u
	}
	for _, tc := range []struct {
		u    *unstructured.Unstructured
		ref  string
		want string
	}{
		{gr(map[string]any{"branch": "main"}), "refs/heads/main", "main@" + sha},
		{gr(map[string]any{"branch": "feature/x"}), "refs/heads/feature/x", "feature/x@" + sha},
		{gr(map[string]any{"tag": "v1.0.0"}), "refs/tags/v1.0.0", "v1.0.0@" + sha},
		{gr(map[string]any{"semver": ">=1.0.0"}), "refs/tags/v1.2.0", "v1.2.0@" + sha},
		{gr(map[string]any{"name": "refs/pull/1/head"}), "refs/pull/1/head", "refs/pull/1/head@" + sha},
		{gr(map[string]any{"commit": h.String()}), "", sha},
		{gr(nil), "refs/heads/master", "master@" + sha},
	} {
		assert.Equal(t, tc.want, revision(tc.u, tc.ref, h), "%v %s", tc.u.Object, tc.ref)
	}
}

// One sink holds a storage directory at a time, in this process or
// another: a second fails with ErrStorageInUse until the first is closed.
// A lock file that is a link or a named pipe is refused, without waiting
// on the pipe; the lock is not served.
func TestAStorageIsOneSinks(t *testing.T) {
	dir := t.TempDir()
	first, err := New(nil, Config{Storage: dir, Address: "h"})
	require.NoError(t, err)
	_, err = New(nil, Config{Storage: dir, Address: "h"})
	require.ErrorIs(t, err, ErrStorageInUse)
	rec := httptest.NewRecorder()
	first.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/.lock", nil))
	assert.Equal(t, http.StatusNotFound, rec.Code)
	require.NoError(t, first.Close())
	second, err := New(nil, Config{Storage: dir, Address: "h"})
	require.NoError(t, err, "released by Close")
	require.NoError(t, second.Close())

	for name, make := range map[string]func(p string) error{
		"link": func(p string) error { return os.Symlink(filepath.Join(t.TempDir(), "elsewhere"), p) },
		"pipe": func(p string) error { return syscall.Mkfifo(p, 0o600) },
	} {
		dir := t.TempDir()
		require.NoError(t, make(filepath.Join(dir, lockName)), name)
		_, err := New(nil, Config{Storage: dir, Address: "h"})
		assert.ErrorIs(t, err, ErrInvalidConfig, name)
	}
}
