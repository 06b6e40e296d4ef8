package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/modwatch/modwatch/watcher"
)

// LabelCheckpoints labels the ConfigMaps of a [ConfigMapStore].
const LabelCheckpoints = "modwatch.io/checkpoints"

// conflictBackoff is patient: many deliverers write to the same few
// ConfigMaps at once after a start or a takeover, and a checkpoint not
// written is a delivery made again.
var conflictBackoff = wait.Backoff{Steps: 30, Duration: 10 * time.Millisecond, Factor: 1.5, Jitter: 0.5, Cap: 2 * time.Second}

// checkpointMaps is how many ConfigMaps a store spreads its checkpoints
// over: a ConfigMap holds 1 MiB, about 4,000 checkpoints.
const checkpointMaps = 16

// ConfigMapStore is a [watcher.Store] in ConfigMaps of one namespace
// ("<prefix>-0" to "<prefix>-f", labelled [LabelCheckpoints]), so that
// checkpoints move with the remotes between replicas: a replica that takes
// a remote over finds what the previous owner delivered and does not
// deliver it again. Each Put is one read and one write, retried on
// conflict; about 60,000 checkpoints fit.
type ConfigMapStore struct {
	client    kubernetes.Interface
	namespace string
	prefix    string
}

var _ watcher.Store = (*ConfigMapStore)(nil)

// NewConfigMapStore returns a store in namespace; prefix names its
// ConfigMaps ("modwatch-checkpoints" by default).
func NewConfigMapStore(client kubernetes.Interface, namespace, prefix string) (*ConfigMapStore, error) {
	if prefix == "" {
		prefix = "modwatch-checkpoints"
	}
	if errs := validation.IsDNS1123Subdomain(prefix + "-0"); len(errs) > 0 {
		return nil, fmt.Errorf("cluster: checkpoint prefix %q: %v", prefix, errs)
	}
	if errs := validation.IsValidLabelValue(prefix); len(errs) > 0 {
		return nil, fmt.Errorf("cluster: checkpoint prefix %q: %v", prefix, errs)
	}
	return &ConfigMapStore{client: client, namespace: namespace, prefix: prefix}, nil
}

// entry is one checkpoint as stored, with its key (data keys are digests).
type entry struct {
	Key        string             `json:"key"`
	Checkpoint watcher.Checkpoint `json:"checkpoint"`
}

// place is the ConfigMap and the data key of key.
func (s *ConfigMapStore) place(key string) (name, field string) {
	sum := sha256.Sum256([]byte(key))
	return fmt.Sprintf("%s-%x", s.prefix, sum[0]%checkpointMaps), hex.EncodeToString(sum[:16])
}

// Get implements watcher.Store.
func (s *ConfigMapStore) Get(ctx context.Context, key string) (watcher.Checkpoint, bool, error) {
	name, field := s.place(key)
	cm, err := s.client.CoreV1().ConfigMaps(s.namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return watcher.Checkpoint{}, false, nil
	}
	if err != nil {
		return watcher.Checkpoint{}, false, fmt.Errorf("cluster: checkpoints %s/%s: %w", s.namespace, name, err)
	}
	raw, ok := cm.Data[field]
	if !ok {
		return watcher.Checkpoint{}, false, nil
	}
	var e entry
	if err := json.Unmarshal([]byte(raw), &e); err != nil || e.Key != key {
		return watcher.Checkpoint{}, false, fmt.Errorf("%w: %s/%s[%s]", watcher.ErrCheckpointUnreadable, s.namespace, name, field)
	}
	return e.Checkpoint, true, nil
}

// Put implements watcher.Store.
func (s *ConfigMapStore) Put(ctx context.Context, key string, cp watcher.Checkpoint) error {
	raw, err := json.Marshal(entry{Key: key, Checkpoint: cp})
	if err != nil {
		return err
	}
	return s.edit(ctx, key, func(data map[string]string, field string) bool {
		if data[field] == string(raw) {
			return false
		}
		data[field] = string(raw)
		return true
	})
}

// Delete implements watcher.Store.
func (s *ConfigMapStore) Delete(ctx context.Context, key string) error {
	return s.edit(ctx, key, func(data map[string]string, field string) bool {
		if _, ok := data[field]; !ok {
			return false
		}
		delete(data, field)
		return true
	})
}

// edit changes the ConfigMap of key with change (which reports whether it
// changed anything), creating it when missing, retried on conflict.
func (s *ConfigMapStore) edit(ctx context.Context, key string, change func(data map[string]string, field string) bool) error {
	name, field := s.place(key)
	cms := s.client.CoreV1().ConfigMaps(s.namespace)
	err := retry.RetryOnConflict(conflictBackoff, func() error {
		cm, err := cms.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.namespace, Labels: map[string]string{LabelCheckpoints: s.prefix}}}
			data := map[string]string{}
			if !change(data, field) {
				return nil
			}
			cm.Data = data
			_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(corev1.Resource("configmaps"), name, err) // made meanwhile: again
			}
			return err
		}
		if err != nil {
			return err
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		if !change(cm.Data, field) {
			return nil
		}
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("cluster: checkpoints %s/%s: %w", s.namespace, name, err)
	}
	return nil
}
