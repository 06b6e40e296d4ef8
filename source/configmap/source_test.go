package configmap_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/modwatch/modwatch/source/configmap"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func config(revision string) string {
	return fmt.Sprintf("clusterName: c1\nsource:\n  gitDefinition:\n    repoUrl: https://git.example.com/control.git\n    targetRevision: '%s'\n", revision)
}

// running is a source under test, with what it said.
type running struct {
	updates chan []watcher.Target
	reloads chan configmap.Reload
	noSets  chan error // what it told the watcher through watcher.NoSet
}

// start runs a source of the file at path, configured by the optional
// edits of its Options.
func start(t *testing.T, path string, edits ...func(*configmap.Options)) *running {
	t.Helper()
	r := &running{updates: make(chan []watcher.Target, 100), reloads: make(chan configmap.Reload, 100), noSets: make(chan error, 100)}
	o := configmap.Options{Path: path, OnReload: func(rl configmap.Reload) { r.reloads <- rl }}
	for _, edit := range edits {
		edit(&o)
	}
	src := configmap.New(o)
	watchertest.Run(t, func(ctx context.Context) error {
		ctx = watcher.WithNoSetReporter(ctx, func(err error) { r.noSets <- err })
		return src.Run(ctx, func(ts []watcher.Target) { r.updates <- ts })
	})
	return r
}

func (r *running) nextReload(t *testing.T) configmap.Reload {
	t.Helper()
	select {
	case rl := <-r.reloads:
		return rl
	case <-time.After(10 * time.Second):
		t.Fatal("no reload")
		return configmap.Reload{}
	}
}

func (r *running) nextNoSet(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.noSets:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("no NoSet")
		return nil
	}
}

func (r *running) nextUpdate(t *testing.T) []watcher.Target {
	t.Helper()
	select {
	case ts := <-r.updates:
		return ts
	case <-time.After(10 * time.Second):
		t.Fatal("no update")
		return nil
	}
}

// revision reads a good reload's one target's revision.
func (r *running) revision(t *testing.T) string {
	t.Helper()
	rl := r.nextReload(t)
	require.NoError(t, rl.Err)
	require.Len(t, rl.Targets, 1)
	ts := r.nextUpdate(t)
	require.Len(t, ts, 1)
	assert.Equal(t, rl.Targets[0].Revision, ts[0].Revision)
	return ts[0].Revision
}

// noMore checks that nothing else was said: each change reloaded once.
// It is called after a later change was seen, so anything the earlier
// ones caused has already arrived.
func (r *running) noMore(t *testing.T) {
	t.Helper()
	select {
	case rl := <-r.reloads:
		t.Fatalf("an extra reload: %+v", rl)
	case ts := <-r.updates:
		t.Fatalf("an extra update: %+v", ts)
	case err := <-r.noSets:
		t.Fatalf("an extra NoSet: %v", err)
	default:
	}
}

// kubelet lays out dir as the kubelet mounts a ConfigMap with key
// config.yaml, and returns a function that updates it as the kubelet's
// AtomicWriter does.
func kubelet(t *testing.T, dir, content string) func(content string) {
	t.Helper()
	n := 0
	write := func(content string) string {
		n++
		ts := fmt.Sprintf("..2026_11_30_08_00_%02d.%09d", n, n)
		require.NoError(t, os.Mkdir(filepath.Join(dir, ts), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, ts, "config.yaml"), []byte(content), 0o644))
		return ts
	}
	current := write(content)
	require.NoError(t, os.Symlink(current, filepath.Join(dir, "..data")))
	require.NoError(t, os.Symlink(filepath.Join("..data", "config.yaml"), filepath.Join(dir, "config.yaml")))
	return func(content string) {
		next := write(content)
		tmp := filepath.Join(dir, "..data_tmp")
		require.NoError(t, os.Symlink(next, tmp))
		require.NoError(t, os.Rename(tmp, filepath.Join(dir, "..data")))
		require.NoError(t, os.RemoveAll(filepath.Join(dir, current)))
		current = next
	}
}

func TestKubeletAtomicUpdate(t *testing.T) {
	dir := t.TempDir()
	update := kubelet(t, dir, config("main"))
	r := start(t, filepath.Join(dir, "config.yaml"))
	assert.Equal(t, "main", r.revision(t))

	update(config("release-2"))
	assert.Equal(t, "release-2", r.revision(t), "the ..data swap is seen, though config.yaml itself never changes")
	update(config("release-3"))
	assert.Equal(t, "release-3", r.revision(t))
	r.noMore(t)
}

func TestRenameWriteAndPlainWriteReloadOnce(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.yaml")
	require.NoError(t, os.WriteFile(path, []byte(config("main")), 0o644))
	r := start(t, path)
	assert.Equal(t, "main", r.revision(t))

	// An editor: write a temporary file, rename it over.
	tmp := filepath.Join(dir, ".agent.yaml.swp")
	require.NoError(t, os.WriteFile(tmp, []byte(config("r2")), 0o644))
	require.NoError(t, os.Rename(tmp, path))
	assert.Equal(t, "r2", r.revision(t))

	// A plain write in two chunks: reading between them would see half a
	// file; the debounce waits for the writes to settle.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	require.NoError(t, err)
	content := config("r3")
	_, err = f.WriteString(content[:20])
	require.NoError(t, err)
	_, err = f.WriteString(content[20:])
	require.NoError(t, err)
	require.NoError(t, f.Close())
	assert.Equal(t, "r3", r.revision(t))

	// A write that changes nothing is not a reload.
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	require.NoError(t, os.WriteFile(path, []byte(config("r4")), 0o644))
	assert.Equal(t, "r4", r.revision(t))
	r.noMore(t)
}

func TestBadFileKeepsTheLastGoodTargets(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.yaml")
	require.NoError(t, os.WriteFile(path, []byte(config("main")), 0o644))
	r := start(t, path)
	require.Equal(t, "main", r.revision(t))

	require.NoError(t, os.WriteFile(path, []byte("source:\n  gitDefinition: [\n"), 0o644))
	rl := r.nextReload(t)
	assert.ErrorContains(t, rl.Err, "line 2")
	assert.ErrorContains(t, rl.Err, path)
	require.Len(t, rl.Targets, 1, "the last good targets stay")
	assert.Equal(t, "main", rl.Targets[0].Revision)
	assert.ErrorIs(t, r.nextNoSet(t), configmap.ErrInvalid, "the watcher is told it has no set")

	require.NoError(t, os.WriteFile(path, []byte(config("{{release}}")), 0o644))
	rl = r.nextReload(t)
	assert.ErrorContains(t, rl.Err, "no value for placeholder {{release}}")
	require.Len(t, rl.Targets, 1)
	assert.ErrorIs(t, r.nextNoSet(t), configmap.ErrInvalid)

	require.NoError(t, os.WriteFile(path, []byte(config("fixed")), 0o644))
	assert.Equal(t, "fixed", r.revision(t), "the watcher heard only good sets")
	r.noMore(t)

	require.NoError(t, os.Remove(path))
	rl = r.nextReload(t)
	assert.True(t, rl.Missing)
	require.ErrorIs(t, r.nextNoSet(t), fs.ErrNotExist)
	require.Len(t, rl.Targets, 1, "a missing file keeps the last good targets")
	assert.Equal(t, "fixed", rl.Targets[0].Revision)
	require.NoError(t, os.WriteFile(path, []byte(config("back")), 0o644))
	assert.Equal(t, "back", r.revision(t), "the watcher was never told to remove anything")
}

// A missing file is never an empty set, however long it is missing: the
// source tells the watcher it has no set (watcher.NoSet) and gives none;
// the file back, its set is given again.
func TestAMissingFileIsNeverAnEmptySet(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.yaml")
	require.NoError(t, os.WriteFile(path, []byte(config("main")), 0o644))
	r := start(t, path)
	require.Equal(t, "main", r.revision(t))

	for range 3 {
		require.NoError(t, os.Remove(path))
		assert.True(t, r.nextReload(t).Missing)
		assert.ErrorContains(t, r.nextNoSet(t), "agent.yaml is missing")
		time.Sleep(400 * time.Millisecond)
		require.NoError(t, os.WriteFile(path, []byte(config("main")), 0o644))
		assert.Equal(t, "main", r.revision(t))
	}
	require.NoError(t, os.Remove(path))
	assert.True(t, r.nextReload(t).Missing)
	r.nextNoSet(t)
	time.Sleep(time.Second)
	r.noMore(t)

	require.NoError(t, os.WriteFile(path, []byte(config("back")), 0o644))
	assert.Equal(t, "back", r.revision(t))
}

// An unreadable file (a directory where the file was, a link to nowhere
// it may follow) is no set either.
func TestAnUnreadableFileIsNoSet(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.yaml")
	require.NoError(t, os.Mkdir(path, 0o755))
	r := start(t, path)
	assert.Error(t, r.nextReload(t).Err)
	assert.Error(t, r.nextNoSet(t))
	r.noMore(t)
	require.NoError(t, os.Remove(path))
	require.NoError(t, os.WriteFile(path, []byte(config("main")), 0o644))
	assert.Equal(t, "main", r.revision(t))
}

// An explicitly empty list removes every target at once; an empty file is
// an error that keeps the last good set.
func TestExplicitlyEmptyConfiguration(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.yaml")
	require.NoError(t, os.WriteFile(path, []byte(config("main")), 0o644))
	r := start(t, path)
	require.Equal(t, "main", r.revision(t))

	require.NoError(t, os.WriteFile(path, nil, 0o644))
	rl := r.nextReload(t)
	assert.ErrorContains(t, rl.Err, "no gitDefinition")
	require.Len(t, rl.Targets, 1)
	assert.ErrorIs(t, r.nextNoSet(t), configmap.ErrInvalid)

	require.NoError(t, os.WriteFile(path, []byte("source:\n  gitDefinitions: []\n"), 0o644))
	rl = r.nextReload(t)
	require.NoError(t, rl.Err)
	assert.Empty(t, rl.Targets)
	assert.Empty(t, r.nextUpdate(t))
	r.noMore(t)
}

func TestStartsWithoutFileAndFailsWithoutDirectory(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.yaml")
	r := start(t, path)
	rl := r.nextReload(t)
	assert.True(t, rl.Missing)
	assert.Empty(t, rl.Targets)
	assert.ErrorIs(t, r.nextNoSet(t), fs.ErrNotExist, "a file missing at start is no set, not an empty one")
	r.noMore(t)
	require.NoError(t, os.WriteFile(path, []byte(config("main")), 0o644))
	assert.Equal(t, "main", r.revision(t))

	err := configmap.New(configmap.Options{Path: filepath.Join(dir, "nowhere", "agent.yaml")}).Run(context.Background(), func([]watcher.Target) {})
	assert.ErrorContains(t, err, "nowhere")
}

// Prefix names the targets, so that two agents' sources can share a
// watcher.
func TestTheIDPrefix(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(config("main")), 0o644))
	r := start(t, path, func(o *configmap.Options) { o.Prefix = "agent-b" })
	require.NoError(t, r.nextReload(t).Err)
	ts := r.nextUpdate(t)
	require.Len(t, ts, 1)
	assert.Equal(t, "agent-b/control", ts[0].ID)
}

// A reference generator's files are read again every refresh interval:
// values that moved there make new targets though the file did not change;
// values that did not move hand nothing new.
func TestReferenceValuesAreReadAgain(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`clusterName: c1
source:
  keyValueGenerator:
    reference:
      files: [{repoUrl: "https://git.example.com/values.git", path: clusters.json}]
  gitDefinition: {repoUrl: "https://git.example.com/control.git", targetRevision: "{{rev}}"}
`), 0o644))
	var mu sync.Mutex
	rev, reads := "v1", 0
	values := func(_ context.Context, ref configmap.Reference, cluster string) (map[string]string, error) {
		mu.Lock()
		defer mu.Unlock()
		reads++
		return map[string]string{"rev": rev}, nil
	}
	r := start(t, path, func(o *configmap.Options) { o.Values, o.ValuesRefresh = values, 20*time.Millisecond })
	assert.Equal(t, "v1", r.revision(t))
	mu.Lock()
	rev = "v2"
	mu.Unlock()
	assert.Equal(t, "v2", r.revision(t), "the file did not change; its values did")
	mu.Lock()
	n := reads
	mu.Unlock()
	require.Eventually(t, func() bool { // two more refreshes, values unchanged
		mu.Lock()
		defer mu.Unlock()
		return reads >= n+2
	}, 10*time.Second, 5*time.Millisecond)
	r.noMore(t)
}
