package fluxartifact

import (
	"cmp"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
)

// endless is a tree of one file that never ends: only ctx stops its read.
type endless struct{}

func (endless) Open(name string) (fs.File, error) {
	switch name {
	case ".":
		return &endlessFile{dir: true}, nil
	case "big":
		return &endlessFile{}, nil
	}
	return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
}

func (endless) ReadDir(name string) ([]fs.DirEntry, error) {
	if name != "." {
		return nil, fs.ErrNotExist
	}
	return []fs.DirEntry{fs.FileInfoToDirEntry(endlessInfo{})}, nil
}

type endlessInfo struct{ dir bool }

func (i endlessInfo) Name() string {
	if i.dir {
		return "."
	}
	return "big"
}
func (i endlessInfo) Size() int64 { return 1 << 40 }
func (i endlessInfo) Mode() fs.FileMode {
	if i.dir {
		return fs.ModeDir | 0o755
	}
	return 0o644
}
func (endlessInfo) ModTime() time.Time { return time.Time{} }
func (i endlessInfo) IsDir() bool      { return i.dir }
func (endlessInfo) Sys() any           { return nil }

type endlessFile struct{ dir bool }

func (f *endlessFile) Stat() (fs.FileInfo, error) { return endlessInfo{f.dir}, nil }
func (f *endlessFile) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
func (f *endlessFile) Close() error { return nil }

// A delivery given up on stops inside the file it is packing, and puts
// nothing in place: the latest stays the last one stored.
func TestAnArtifactGivenUpOnStopsAndPutsNothingInPlace(t *testing.T) {
	s, dir := newStorage(t, 2, time.Hour)
	_, err := s.store(context.Background(), "gitrepository/ns/app", "b.tar.gz", fstest.MapFS{"f": {Data: []byte("b")}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = s.store(ctx, "gitrepository/ns/app", "a.tar.gz", endless{})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	link, err := os.Readlink(filepath.Join(dir, "gitrepository/ns/app", latest))
	require.NoError(t, err)
	assert.Equal(t, "b.tar.gz", link)
	es, err := os.ReadDir(filepath.Join(dir, "gitrepository/ns/app"))
	require.NoError(t, err)
	assert.Len(t, es, 2, "b and the link: no temporary file, no a")
}

// Artifacts are readable by the process's user only, as
// source-controller's: files 0600 in folders 0700.
func TestArtifactsAreTheProcesssOnly(t *testing.T) {
	s, dir := newStorage(t, 2, time.Hour)
	a, err := s.store(context.Background(), "gitrepository/ns/app", "c.tar.gz", fstest.MapFS{"f": {Data: []byte("c")}})
	require.NoError(t, err)
	f, err := os.Stat(filepath.Join(dir, a.Path))
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o600), f.Mode().Perm())
	for _, d := range []string{"gitrepository", "gitrepository/ns", "gitrepository/ns/app"} {
		st, err := os.Stat(filepath.Join(dir, d))
		require.NoError(t, err)
		assert.Equal(t, fs.FileMode(0o700), st.Mode().Perm(), d)
	}
}

var gitRepos = schema.GroupVersionResource{Group: "source.toolkit.fluxcd.io", Version: "v1", Resource: "gitrepositories"}

func fakeRepo(ref map[string]any) (*dynfake.FakeDynamicClient, payload.GitRepository) {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
		"metadata": map[string]any{"namespace": "ns", "name": "app", "uid": "u1", "generation": int64(1)},
		"spec":     map[string]any{"url": "https://example.com/x.git", "interval": "1m", "ref": ref}}}
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{gitRepos: "GitRepositoryList"}, u)
	return dyn, payload.GitRepository{APIVersion: "source.toolkit.fluxcd.io/v1", Namespace: "ns", Name: "app", UID: "u1", Generation: 1}
}

// unopenable lists a name it cannot open, as a mirror lists a file name
// that is not UTF-8.
type unopenable struct{ fstest.MapFS }

func (u unopenable) Open(name string) (fs.File, error) {
	if name == "bad" {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	return u.MapFS.Open(name)
}

// A tree with a name that cannot be opened has no artifact: the delivery
// fails for good (the next commit is tried), not again and again.
func TestATreeThatCannotBeArchivedFailsForGood(t *testing.T) {
	dyn, repo := fakeRepo(map[string]any{"branch": "main"})
	s, err := New(dyn, Config{Storage: t.TempDir(), Address: "h"})
	require.NoError(t, err)
	defer s.Close()
	err = s.Deliver(context.Background(), watcher.Change{Target: watcher.Target{ID: "flux/ns/app", Payload: repo}, Ref: "refs/heads/main",
		To: gitutil.Hash{1}, FS: unopenable{fstest.MapFS{"bad": {Data: []byte("x")}}}})
	require.ErrorIs(t, err, fs.ErrInvalid)
	assert.True(t, watcher.IsPermanent(err), "permanent: %v", err)
}

// The storage's folders are what the sink holds: its targets, removed by
// their IDs (a GitRepository deleted while the program was stopped), and
// forgotten with their artifacts (a suspended one deleted).
func TestTheStorageIsTheSinksInventory(t *testing.T) {
	dyn, _ := fakeRepo(map[string]any{"branch": "main"})
	dir := t.TempDir()
	s, err := New(dyn, Config{Storage: dir, Address: "h"})
	require.NoError(t, err)
	defer s.Close()
	for _, o := range []string{"ns/app", "ns/other", "team/app"} {
		_, err := s.store.store(context.Background(), "gitrepository/"+o, "c.tar.gz", fstest.MapFS{"f": {Data: []byte(o)}})
		require.NoError(t, err)
	}
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "gitrepository", "ns", "Not_A_Name"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "gitrepository", "stray.tar.gz"), nil, 0o600))
	ids, err := s.Targets(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []string{"flux/ns/app", "flux/ns/other", "flux/team/app"}, ids)

	require.NoError(t, s.Remove(context.Background(), watcher.Target{ID: "flux/ns/app"}))
	require.NoError(t, s.Forget(context.Background(), watcher.Target{ID: "flux/team/app"}))
	for _, id := range []string{"app", "flux/../..", "flux/ns", "flux/ns/..", "gitsync/ns/other"} {
		require.NoError(t, s.Remove(context.Background(), watcher.Target{ID: id}), id)
	}
	ids, err = s.Targets(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []string{"flux/ns/other"}, ids)
	_, err = os.Stat(filepath.Join(dir, "gitrepository", "stray.tar.gz"))
	assert.NoError(t, err, "what no ID names stays")
}

// A commit pinned with a name or a branch keeps it in the revision, as
// source-controller's checkout of a commit does.
func TestAPinnedCommitsRevisionKeepsItsRef(t *testing.T) {
	h := gitutil.Hash{0xcd}
	for _, tc := range []struct {
		ref  map[string]any
		want string
	}{
		{map[string]any{"commit": h.String()}, "sha1:" + h.String()},
		{map[string]any{"commit": h.String(), "branch": "main"}, "main@sha1:" + h.String()},
		{map[string]any{"commit": h.String(), "name": "refs/heads/main"}, "refs/heads/main@sha1:" + h.String()},
	} {
		dyn, repo := fakeRepo(tc.ref)
		s, err := New(dyn, Config{Storage: t.TempDir(), Address: "h"})
		require.NoError(t, err)
		require.NoError(t, s.Deliver(context.Background(), watcher.Change{Target: watcher.Target{ID: "flux/ns/app", Payload: repo},
			To: h, FS: fstest.MapFS{"f": {Data: []byte("x")}}}))
		u, err := dyn.Resource(gitRepos).Namespace("ns").Get(context.Background(), "app", metav1.GetOptions{})
		require.NoError(t, err)
		got, _, _ := unstructured.NestedString(u.Object, "status", "artifact", "revision")
		assert.Equal(t, tc.want, got, "%v", tc.ref)
		require.NoError(t, s.Close())
	}
}

// The address is a host[:port], or an http(s) URL of a host without a
// trailing slash: what makes an artifact's URL well formed.
func TestTheAddressIsChecked(t *testing.T) {
	for a, ok := range map[string]bool{
		"source-controller.flux-system.svc.cluster.local.": true, "localhost:9090": true, "http://h:1": true, "https://h/prefix": true,
		"": false, "ftp://h": false, "h/": false, "http://h/": false, "http://": false, "h p": false, "h?x": false, "h/x": false, "http:///x": false,
	} {
		_, err := New(nil, Config{Storage: t.TempDir(), Address: a})
		if ok {
			assert.NoError(t, err, a)
		} else {
			assert.ErrorIs(t, err, ErrInvalidConfig, a)
		}
	}
}

// Removing a target releases source-controller's finalizer from its
// GitRepository only when the object is being deleted, and is the one the
// sink served: the target's (its UID), or, for a target known by its ID
// alone (the sweep at start), one whose artifact's URL is the sink's. The
// other finalizers stay; an object not being deleted (it left the set for
// another reason), another object of the name, one source-controller
// served last, or one already gone, is left as it is. A cluster serving
// Flux's v1beta2 alone is found too.
func TestRemoveReleasesFluxsFinalizerOfADeletedObject(t *testing.T) {
	v1beta2 := schema.GroupVersionResource{Group: gitRepos.Group, Version: "v1beta2", Resource: gitRepos.Resource}
	for name, tc := range map[string]struct {
		deleting bool
		uid      string // the target's; "" for none
		url      string // the object's artifact's
		version  schema.GroupVersionResource
		want     []string
	}{
		"being deleted":                        {deleting: true, uid: "u1", want: []string{"example.com/keep"}},
		"not being deleted":                    {uid: "u1", want: []string{Finalizer, "example.com/keep"}},
		"another object":                       {deleting: true, uid: "u2", want: []string{Finalizer, "example.com/keep"}},
		"no uid, its artifact the sink's":      {deleting: true, url: "http://h/gitrepository/ns/app/c.tar.gz", want: []string{"example.com/keep"}},
		"no uid, source-controller's artifact": {deleting: true, url: "http://source-controller.flux-system.svc/gitrepository/ns/app/c.tar.gz", want: []string{Finalizer, "example.com/keep"}},
		"no uid, no artifact":                  {deleting: true, want: []string{Finalizer, "example.com/keep"}},
		"no uid, v1beta2 served alone":         {deleting: true, url: "http://h/x.tar.gz", version: v1beta2, want: []string{"example.com/keep"}},
	} {
		t.Run(name, func(t *testing.T) {
			gvr := cmp.Or(tc.version, gitRepos)
			u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": gvr.GroupVersion().String(), "kind": "GitRepository",
				"metadata": map[string]any{"namespace": "ns", "name": "app", "uid": "u1", "generation": int64(1)},
				"spec":     map[string]any{"url": "https://example.com/x.git", "interval": "1m"}}}
			u.SetFinalizers([]string{Finalizer, "example.com/keep"})
			if tc.deleting {
				now := metav1.Now()
				u.SetDeletionTimestamp(&now)
			}
			if tc.url != "" {
				require.NoError(t, unstructured.SetNestedField(u.Object, tc.url, "status", "artifact", "url"))
			}
			dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{gvr: "GitRepositoryList"}, u)
			s, err := New(dyn, Config{Storage: t.TempDir(), Address: "h"})
			require.NoError(t, err)
			defer s.Close()
			target := watcher.Target{ID: "flux/ns/app"}
			if tc.uid != "" {
				target.Payload = payload.GitRepository{APIVersion: gvr.GroupVersion().String(), Namespace: "ns", Name: "app", UID: tc.uid, Generation: 1}
			}
			require.NoError(t, s.Remove(context.Background(), target))
			got, err := dyn.Resource(gvr).Namespace("ns").Get(context.Background(), "app", metav1.GetOptions{})
			require.NoError(t, err)
			assert.Equal(t, tc.want, got.GetFinalizers())
		})
	}
	dyn, _ := fakeRepo(map[string]any{"branch": "main"})
	s, err := New(dyn, Config{Storage: t.TempDir(), Address: "h"})
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Remove(context.Background(), watcher.Target{ID: "flux/ns/gone"}), "an object already gone")
}
