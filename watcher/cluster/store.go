package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
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
// over ("<prefix>-00" to "<prefix>-ff"): each Get reads, and each Put
// reads and writes, a ConfigMap with 1/256 of the checkpoints. A
// checkpoint takes about 290 bytes (BenchmarkConfigMapStore's, with no
// Reads), so 256 ConfigMaps of 1 MiB hold about 900,000.
const checkpointMaps = 256

// legacyMaps is how many ConfigMaps release 0.1.0 spread checkpoints over
// ("<prefix>-0" to "<prefix>-f"). A checkpoint missing from the current
// ConfigMaps is looked for there, so that an upgrade delivers nothing
// again.
const legacyMaps = 16

// ConfigMapStore is a [watcher.Store] in ConfigMaps of one namespace
// ("<prefix>-00" to "<prefix>-ff", labelled [LabelCheckpoints]), so that
// checkpoints move with the remotes between replicas: a replica that takes
// a remote over finds what the previous owner delivered and does not
// deliver it again. Each Put is one read and one write, retried on
// conflict, of the one ConfigMap of its key.
//
// A checkpoint that release 0.1.0 wrote ("<prefix>-0" to "<prefix>-f") is
// read when the current ConfigMaps lack it, until a look finds its old
// ConfigMap missing (then that one is never read again); a Put writes it anew, and a Delete
// removes it from both. A target whose commit has not moved since keeps
// its checkpoint there: deleting the old ConfigMaps costs such a target
// one delivery again, and nothing else.
type ConfigMapStore struct {
	client    kubernetes.Interface
	namespace string
	prefix    string

	mu sync.Mutex
	// legacyGone: the ConfigMap of release 0.1.0 was not there when first
	// looked for, and is never read.
	legacyGone [legacyMaps]bool
}

var _ watcher.BatchStore = (*ConfigMapStore)(nil)

// ConfigMapStoreConfig says where a ConfigMapStore keeps the checkpoints.
type ConfigMapStoreConfig struct {
	// Namespace holds the ConfigMaps.
	Namespace string
	// Prefix names the ConfigMaps ("<prefix>-00" and on) and labels them
	// (default "modwatch-checkpoints").
	Prefix string
}

// Default fills in the prefix left empty.
func (c *ConfigMapStoreConfig) Default() {
	if c.Prefix == "" {
		c.Prefix = "modwatch-checkpoints"
	}
}

// Validate checks that the prefix makes ConfigMap names and a label value.
func (c ConfigMapStoreConfig) Validate() error {
	if errs := validation.IsDNS1123Subdomain(c.Prefix + "-00"); len(errs) > 0 {
		return fmt.Errorf("cluster: checkpoint prefix %q: %v", c.Prefix, errs)
	}
	if errs := validation.IsValidLabelValue(c.Prefix); len(errs) > 0 {
		return fmt.Errorf("cluster: checkpoint prefix %q: %v", c.Prefix, errs)
	}
	return nil
}

// NewConfigMapStore returns a store where cfg says.
func NewConfigMapStore(client kubernetes.Interface, cfg ConfigMapStoreConfig) (*ConfigMapStore, error) {
	cfg.Default()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &ConfigMapStore{client: client, namespace: cfg.Namespace, prefix: cfg.Prefix}, nil
}

// entry is one checkpoint as stored, with its key (data keys are digests).
type entry struct {
	Key        string             `json:"key"`
	Checkpoint watcher.Checkpoint `json:"checkpoint"`
}

// place is the ConfigMap and the data key of key, and the ConfigMap
// release 0.1.0 kept it in (the index of it, and its name).
func (s *ConfigMapStore) place(key string) (name, field string, legacy int, legacyName string) {
	sum := sha256.Sum256([]byte(key))
	legacy = int(sum[0] % legacyMaps)
	return fmt.Sprintf("%s-%02x", s.prefix, int(sum[0])%checkpointMaps), hex.EncodeToString(sum[:16]), legacy, fmt.Sprintf("%s-%x", s.prefix, legacy)
}

// Get implements watcher.Store.
func (s *ConfigMapStore) Get(ctx context.Context, key string) (watcher.Checkpoint, bool, error) {
	name, field, legacy, legacyName := s.place(key)
	cp, ok, _, err := s.read(ctx, name, field, key)
	if ok || err != nil || s.legacyIsGone(legacy) {
		return cp, ok, err
	}
	cp, ok, exists, err := s.read(ctx, legacyName, field, key)
	if err == nil && !exists {
		s.mu.Lock()
		s.legacyGone[legacy] = true
		s.mu.Unlock()
	}
	return cp, ok, err
}

func (s *ConfigMapStore) legacyIsGone(i int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.legacyGone[i]
}

// read reads the checkpoint of key from field of the ConfigMap name, and
// says whether the ConfigMap exists.
func (s *ConfigMapStore) read(ctx context.Context, name, field, key string) (cp watcher.Checkpoint, ok, exists bool, err error) {
	cm, err := s.client.CoreV1().ConfigMaps(s.namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return watcher.Checkpoint{}, false, false, nil
	}
	if err != nil {
		return watcher.Checkpoint{}, false, false, fmt.Errorf("cluster: checkpoints %s/%s: %w", s.namespace, name, err)
	}
	l := s.decode(cm, field, key)
	return l.Checkpoint, l.OK, true, l.Err
}

// decode reads the checkpoint of key from field of cm.
func (s *ConfigMapStore) decode(cm *corev1.ConfigMap, field, key string) watcher.Lookup {
	raw, ok := cm.Data[field]
	if !ok {
		return watcher.Lookup{}
	}
	var e entry
	if err := json.Unmarshal([]byte(raw), &e); err != nil || e.Key != key {
		return watcher.Lookup{Err: fmt.Errorf("%w: %s/%s[%s]", watcher.ErrCheckpointUnreadable, s.namespace, cm.Name, field)}
	}
	return watcher.Lookup{Checkpoint: e.Checkpoint, OK: true}
}

// GetMany implements watcher.BatchStore. It reads each ConfigMap holding
// one of keys once: in one List of the store's ConfigMaps (found by their
// label; the client needs the list verb on ConfigMaps) when keys fall in
// half of them or more, else in a Get each. Then, as Get does, the
// ConfigMaps of release 0.1.0 where the current ones lack a key. A
// ConfigMap that lost its label counts as missing for a List (its
// checkpoints are delivered again) until a Put or Delete in it labels it
// again.
func (s *ConfigMapStore) GetMany(ctx context.Context, keys []string) ([]watcher.Lookup, error) {
	maps := map[string]*corev1.ConfigMap{} // read; nil: not there
	names := map[string]bool{}
	for _, k := range keys {
		name, _, _, _ := s.place(k)
		names[name] = true
	}
	if err := s.readMaps(ctx, names, maps); err != nil {
		return nil, err
	}
	out := make([]watcher.Lookup, len(keys))
	legacy := map[string]bool{}
	for i, k := range keys {
		name, field, l, legacyName := s.place(k)
		if cm := maps[name]; cm != nil {
			out[i] = s.decode(cm, field, k)
		}
		if !out[i].OK && out[i].Err == nil && !s.legacyIsGone(l) {
			legacy[legacyName] = true
		}
	}
	if len(legacy) == 0 {
		return out, nil
	}
	if err := s.readMaps(ctx, legacy, maps); err != nil {
		return nil, err
	}
	for i, k := range keys {
		_, field, l, legacyName := s.place(k)
		if !legacy[legacyName] || out[i].OK || out[i].Err != nil {
			continue
		}
		cm := maps[legacyName]
		if cm == nil {
			s.mu.Lock()
			s.legacyGone[l] = true
			s.mu.Unlock()
			continue
		}
		out[i] = s.decode(cm, field, k)
	}
	return out, nil
}

// readMaps reads the ConfigMaps named in names that maps lacks into it
// (nil for those not there): in one List when they are half the store's
// or more, else each in a Get, a few at a time.
func (s *ConfigMapStore) readMaps(ctx context.Context, names map[string]bool, maps map[string]*corev1.ConfigMap) error {
	var missing []string
	for name := range names {
		if _, ok := maps[name]; !ok {
			missing = append(missing, name)
		}
	}
	cms := s.client.CoreV1().ConfigMaps(s.namespace)
	if 2*len(missing) >= checkpointMaps {
		list, err := cms.List(ctx, metav1.ListOptions{LabelSelector: LabelCheckpoints + "=" + s.prefix})
		if err != nil {
			return fmt.Errorf("cluster: checkpoints %s: %w", s.namespace, err)
		}
		for _, name := range missing {
			maps[name] = nil
		}
		for i := range list.Items {
			maps[list.Items[i].Name] = &list.Items[i] // 0.1.0's too: read when needed
		}
		return nil
	}
	var mu sync.Mutex
	var g errgroup.Group
	g.SetLimit(8)
	for _, name := range missing {
		g.Go(func() error {
			cm, err := cms.Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				cm, err = nil, nil
			}
			if err != nil {
				return fmt.Errorf("cluster: checkpoints %s/%s: %w", s.namespace, name, err)
			}
			mu.Lock()
			defer mu.Unlock()
			maps[name] = cm
			return nil
		})
	}
	return g.Wait()
}

// Put implements watcher.Store.
func (s *ConfigMapStore) Put(ctx context.Context, key string, cp watcher.Checkpoint) error {
	raw, err := json.Marshal(entry{Key: key, Checkpoint: cp})
	if err != nil {
		return err
	}
	name, field, _, _ := s.place(key)
	return s.edit(ctx, name, func(data map[string]string) bool {
		if data[field] == string(raw) {
			return false
		}
		data[field] = string(raw)
		return true
	})
}

// Delete implements watcher.Store. It removes the checkpoint from the
// ConfigMap of release 0.1.0 too, unless that was found missing.
func (s *ConfigMapStore) Delete(ctx context.Context, key string) error {
	name, field, legacy, legacyName := s.place(key)
	remove := func(data map[string]string) bool {
		if _, ok := data[field]; !ok {
			return false
		}
		delete(data, field)
		return true
	}
	if err := s.edit(ctx, name, remove); err != nil {
		return err
	}
	if s.legacyIsGone(legacy) {
		return nil
	}
	return s.edit(ctx, legacyName, remove)
}

// edit changes the ConfigMap name with change (which reports whether it
// changed anything), creating it when missing, retried on conflict.
func (s *ConfigMapStore) edit(ctx context.Context, name string, change func(data map[string]string) bool) error {
	cms := s.client.CoreV1().ConfigMaps(s.namespace)
	err := retry.RetryOnConflict(conflictBackoff, func() error {
		cm, err := cms.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.namespace, Labels: map[string]string{LabelCheckpoints: s.prefix}}}
			data := map[string]string{}
			if !change(data) {
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
		// A ConfigMap that lost its label is labelled again, so that
		// GetMany's List finds it.
		relabel := cm.Labels[LabelCheckpoints] != s.prefix
		if !change(cm.Data) && !relabel {
			return nil
		}
		if cm.Labels == nil {
			cm.Labels = map[string]string{}
		}
		cm.Labels[LabelCheckpoints] = s.prefix
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("cluster: checkpoints %s/%s: %w", s.namespace, name, err)
	}
	return nil
}
