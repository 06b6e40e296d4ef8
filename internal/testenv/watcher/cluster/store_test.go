package cluster_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/cluster"
)

// Checkpoints written by one replica are read by another; concurrent
// writers to the same ConfigMap lose nothing; a damaged entry is
// unreadable, not a wrong checkpoint.
func TestConfigMapStore(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	a, err := cluster.NewConfigMapStore(env.Kube, ns, "")
	require.NoError(t, err)
	b, err := cluster.NewConfigMapStore(env.Kube, ns, "")
	require.NoError(t, err)

	_, ok, err := a.Get(ctx, "t\x00sink")
	require.NoError(t, err)
	assert.False(t, ok)
	cp := watcher.Checkpoint{Commit: "c1", Tree: "t1", Target: "fp", Time: time.Now().UTC().Truncate(time.Second)}
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
			assert.NoError(t, s.Put(ctx, fmt.Sprint("k", i), watcher.Checkpoint{Commit: fmt.Sprint(i)}))
		})
	}
	wg.Wait()
	for i := range 64 {
		got, ok, err := b.Get(ctx, fmt.Sprint("k", i))
		require.NoError(t, err)
		require.True(t, ok, i)
		assert.Equal(t, fmt.Sprint(i), got.Commit)
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
	assert.LessOrEqual(t, len(cms.Items), 16)
	for _, cm := range cms.Items {
		for k := range cm.Data {
			cm.Data[k] = "{not json"
		}
		_, err := env.Kube.CoreV1().ConfigMaps(ns).Update(ctx, &cm, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	_, _, err = b.Get(ctx, "t\x00sink")
	assert.ErrorIs(t, err, watcher.ErrCheckpointUnreadable)

	_, err = cluster.NewConfigMapStore(env.Kube, ns, "Not_A_Name")
	assert.Error(t, err)
}
