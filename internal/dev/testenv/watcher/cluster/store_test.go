package cluster_test

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/cluster"
)

// Checkpoints written by one replica are read by another; concurrent
// writers to the same ConfigMap lose nothing; a damaged entry is
// unreadable, not a wrong checkpoint.
func TestConfigMapStore(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	a, err := cluster.NewConfigMapStore(env.Kube, cluster.ConfigMapStoreConfig{Namespace: ns})
	require.NoError(t, err)
	b, err := cluster.NewConfigMapStore(env.Kube, cluster.ConfigMapStoreConfig{Namespace: ns})
	require.NoError(t, err)

	_, ok, err := a.Get(ctx, "t\x00sink")
	require.NoError(t, err)
	assert.False(t, ok)
	cp := watcher.Checkpoint{Commit: named("c1"), Tree: named("t1"), Target: "fp", Time: time.Now().UTC().Truncate(time.Second)}
	require.NoError(t, a.Put(ctx, "t\x00sink", cp))
	got, ok, err := b.Get(ctx, "t\x00sink")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, cp, got)

	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			s := a
			if i%2 == 1 {
				s = b
			}
			assert.NoError(t, s.Put(ctx, fmt.Sprint("k", i), watcher.Checkpoint{Commit: named(fmt.Sprint(i))}))
		})
	}
	wg.Wait()
	for i := range 64 {
		got, ok, err := b.Get(ctx, fmt.Sprint("k", i))
		require.NoError(t, err)
		require.True(t, ok, i)
		assert.Equal(t, named(fmt.Sprint(i)), got.Commit)
	}
	require.NoError(t, a.Delete(ctx, "k3"))
	require.NoError(t, a.Delete(ctx, "k3"), "deleting a missing key is not an error")
	_, ok, err = b.Get(ctx, "k3")
	require.NoError(t, err)
	assert.False(t, ok)

	// A damaged entry: the watcher delivers again rather than trust it.
	cms, err := env.Kube.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: cluster.LabelCheckpoints + "=modwatch-checkpoints"})
	require.NoError(t, err)
	require.NotEmpty(t, cms.Items)
	assert.LessOrEqual(t, len(cms.Items), 256)
	for _, cm := range cms.Items {
		for k := range cm.Data {
			cm.Data[k] = "{not json"
		}
		_, err := env.Kube.CoreV1().ConfigMaps(ns).Update(ctx, &cm, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	_, _, err = b.Get(ctx, "t\x00sink")
	assert.ErrorIs(t, err, watcher.ErrCheckpointUnreadable)

	_, err = cluster.NewConfigMapStore(env.Kube, cluster.ConfigMapStoreConfig{Namespace: ns, Prefix: "Not_A_Name"})
	assert.Error(t, err)
}

// legacyPlace is where release 0.1.0 kept the checkpoint of key: 16
// ConfigMaps, "<prefix>-0" to "<prefix>-f", by the first byte of the key's
// SHA-256, under the hex of its first 16 bytes.
func legacyPlace(prefix, key string) (name, field string) {
	sum := sha256.Sum256([]byte(key))
	return fmt.Sprintf("%s-%x", prefix, sum[0]%16), hex.EncodeToString(sum[:16])
}

// A store finds what release 0.1.0 wrote, so an upgrade delivers nothing
// again; a Put writes the current layout, which wins from then on; a
// Delete removes the checkpoint from both. Where release 0.1.0 never
// wrote, a missing checkpoint costs a look at each old ConfigMap once, not
// at every Get.
func TestConfigMapStoreReadsTheLayoutOfRelease010(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	const key = "team-a/app/apply"
	old := watcher.Checkpoint{Commit: named("c-old"), Tree: named("t-old"), Target: "fp", Time: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	name, field := writeLegacy(t, ns, key, old)

	s, err := cluster.NewConfigMapStore(env.Kube, cluster.ConfigMapStoreConfig{Namespace: ns})
	require.NoError(t, err)
	got, ok, err := s.Get(ctx, key)
	require.NoError(t, err)
	require.True(t, ok, "the checkpoint release 0.1.0 wrote")
	assert.Equal(t, old, got)

	now := watcher.Checkpoint{Commit: named("c-new"), Tree: named("t-new"), Target: "fp", Time: old.Time.Add(time.Hour)}
	require.NoError(t, s.Put(ctx, key, now))
	got, ok, err = s.Get(ctx, key)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, now, got, "what is written now wins over the old layout")
	cm, err := env.Kube.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Contains(t, cm.Data, field, "a Put leaves the old layout as it was")

	require.NoError(t, s.Delete(ctx, key))
	_, ok, err = s.Get(ctx, key)
	require.NoError(t, err)
	assert.False(t, ok, "deleted from both layouts")
	cm, err = env.Kube.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.NotContains(t, cm.Data, field)

	// A namespace release 0.1.0 never wrote to.
	fresh := env.Namespace(t)
	s, w := wiredStore(t, fresh)
	const n = 200
	for i := range n {
		_, ok, err := s.Get(ctx, fmt.Sprint("missing-", i))
		require.NoError(t, err)
		require.False(t, ok)
	}
	assert.LessOrEqual(t, w.requests.Load(), int64(n+16), "each old ConfigMap is looked for once")
	require.NoError(t, s.Put(ctx, "k", now))
	cms, err := env.Kube.CoreV1().ConfigMaps(fresh).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, cms.Items, 1)
	assert.Regexp(t, `^modwatch-checkpoints-[0-9a-f]{2}$`, cms.Items[0].Name)
}

// GetMany answers for each key what Get does, in the order of the keys:
// checkpoints in either layout, missing ones and damaged ones. Keys in half
// of the ConfigMaps or more cost one List and a look at each old
// ConfigMap at most; a few keys cost a Get of each of their ConfigMaps.
func TestConfigMapStoreGetManyAnswersAsGet(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	s, err := cluster.NewConfigMapStore(env.Kube, cluster.ConfigMapStoreConfig{Namespace: ns})
	require.NoError(t, err)
	var keys []string
	for i := range 600 {
		keys = append(keys, fmt.Sprint("team-", i, "/app/apply"))
	}
	for i, k := range keys[:400] {
		require.NoError(t, s.Put(ctx, k, watcher.Checkpoint{Commit: named(fmt.Sprint("c", i)), Target: "fp"}))
	}
	// One checkpoint in release 0.1.0's layout alone, one damaged.
	const oldKey = "team-old/app/apply"
	writeLegacy(t, ns, oldKey, watcher.Checkpoint{Commit: named("c-old")})
	keys = append(keys, oldKey)
	damaged := keys[7]
	cmName, cmField := currentPlace("modwatch-checkpoints", damaged)
	cm, err := env.Kube.CoreV1().ConfigMaps(ns).Get(ctx, cmName, metav1.GetOptions{})
	require.NoError(t, err)
	cm.Data[cmField] = `{"key":"someone else"}`
	_, err = env.Kube.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
	require.NoError(t, err)

	check := func(keys []string, most int64) {
		t.Helper()
		fresh, fw := wiredStore(t, ns) // no old ConfigMap known to be gone yet
		got, err := fresh.GetMany(ctx, keys)
		require.NoError(t, err)
		require.Len(t, got, len(keys))
		assert.LessOrEqual(t, fw.requests.Load(), most)
		for i, k := range keys {
			cp, ok, err := s.Get(ctx, k)
			assert.Equal(t, watcher.Lookup{Checkpoint: cp, OK: ok, Err: err}, got[i], k)
		}
	}
	check(keys, 1+16)
	check([]string{oldKey, damaged, keys[3], keys[500]}, 4+2)
	got, err := s.GetMany(ctx, []string{damaged})
	require.NoError(t, err)
	assert.ErrorIs(t, got[0].Err, watcher.ErrCheckpointUnreadable)

	// A ConfigMap that lost its label is missing to a List, until the
	// store's next write to it labels it again.
	unlabelled := keys[11]
	cmName, _ = currentPlace("modwatch-checkpoints", unlabelled)
	cm, err = env.Kube.CoreV1().ConfigMaps(ns).Get(ctx, cmName, metav1.GetOptions{})
	require.NoError(t, err)
	delete(cm.Labels, cluster.LabelCheckpoints)
	_, err = env.Kube.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
	require.NoError(t, err)
	got, err = s.GetMany(ctx, keys)
	require.NoError(t, err)
	assert.False(t, got[11].OK, "not listed")
	require.NoError(t, s.Put(ctx, unlabelled, watcher.Checkpoint{Commit: named("c-again")}))
	got, err = s.GetMany(ctx, keys)
	require.NoError(t, err)
	assert.True(t, got[11].OK, "labelled again by the Put")
	assert.Equal(t, named("c-again"), got[11].Checkpoint.Commit)
}

// writeLegacy writes cp for key in a new ConfigMap where release 0.1.0
// kept it, and returns its name and field.
func writeLegacy(t *testing.T, ns, key string, cp watcher.Checkpoint) (name, field string) {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"key": key, "checkpoint": cp})
	require.NoError(t, err)
	name, field = legacyPlace("modwatch-checkpoints", key)
	_, err = env.Kube.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{cluster.LabelCheckpoints: "modwatch-checkpoints"}},
		Data:       map[string]string{field: string(raw)},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return name, field
}

// currentPlace is where a store keeps the checkpoint of key: 256
// ConfigMaps by the first byte of the key's SHA-256.
func currentPlace(prefix, key string) (name, field string) {
	sum := sha256.Sum256([]byte(key))
	return fmt.Sprintf("%s-%02x", prefix, sum[0]), hex.EncodeToString(sum[:16])
}

// named is a commit named name, for changes whose commits need only be
// told apart: name itself when it is 40 hexadecimal digits, a hash of it
// otherwise ("c1").
func named(name string) gitutil.Hash {
	if h, err := gitutil.ParseHash(name); err == nil {
		return h
	}
	return gitutil.Hash(sha1.Sum([]byte(name)))
}
