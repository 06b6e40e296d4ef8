package fluxreceiver

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/modwatch/modwatch/watcher/payload"
)

// objectName names the Receiver and the Secret of a GitRepository.
func objectName(repo string) string {
	name := "modwatch-" + repo
	if len(name) > 63 { // a Receiver's name is used in its webhook path
		sum := sha256.Sum256([]byte(repo))
		name = "modwatch-" + hex.EncodeToString(sum[:12])
	}
	return name
}

// ensure puts the GitRepository's Secret and Receiver in place (the first
// time; then Run keeps them there) and waits for the Receiver's webhook
// path.
func (s *Sink) ensure(ctx context.Context, repo payload.GitRepository) (*managed, string, error) {
	s.mu.Lock()
	m := s.managed[repo.Key()]
	s.mu.Unlock()
	if m == nil || m.repo.UID != repo.UID {
		// New to this sink: written now; from then on Run keeps the objects
		// in place, so later deliveries do not write them again.
		token, err := s.existingToken(ctx, repo)
		if err != nil {
			return nil, "", err
		}
		m = &managed{repo: repo, token: token}
		if err := s.apply(ctx, m); err != nil {
			return nil, "", err
		}
		s.mu.Lock()
		s.managed[repo.Key()] = m
		s.mu.Unlock()
	}

	name := objectName(repo.Name)
	path := WebhookPath(m.token, name, repo.Namespace)
	ready := func(u *unstructured.Unstructured) bool {
		got, _, _ := unstructured.NestedString(u.Object, "status", "webhookPath")
		return got == path
	}
	if err := s.waitFor(ctx, ReceiverGVR, repo.Namespace, name, s.cfg.ReadyTimeout, ready); err != nil {
		return nil, "", fmt.Errorf("fluxreceiver: receiver %s/%s has no status.webhookPath for its token (is notification-controller running?): %w", repo.Namespace, name, err)
	}
	return m, path, nil
}

// existingToken keeps the token of a Secret of ours that already exists
// (a restart), or makes a new one.
func (s *Sink) existingToken(ctx context.Context, repo payload.GitRepository) (string, error) {
	sec, err := s.dyn.Resource(SecretGVR).Namespace(repo.Namespace).Get(ctx, objectName(repo.Name), metav1.GetOptions{})
	if err == nil && sec.GetLabels()[LabelManagedBy] == s.cfg.FieldManager {
		enc, _, _ := unstructured.NestedString(sec.Object, "data", "token")
		if tok, derr := base64.StdEncoding.DecodeString(enc); derr == nil && len(tok) >= 32 {
			return string(tok), nil
		}
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return "", fmt.Errorf("fluxreceiver: read secret %s/%s: %w", repo.Namespace, objectName(repo.Name), err)
	}
	return randomToken()
}

// apply writes the Secret and the Receiver with server-side apply.
func (s *Sink) apply(ctx context.Context, m *managed) error {
	name, ns := objectName(m.repo.Name), m.repo.Namespace
	meta := func() map[string]any {
		return map[string]any{
			"name": name, "namespace": ns,
			"labels": map[string]any{LabelManagedBy: s.cfg.FieldManager},
			"ownerReferences": []any{map[string]any{
				"apiVersion": m.repo.APIVersion, "kind": "GitRepository",
				"name": m.repo.Name, "uid": m.repo.UID, "controller": true,
			}},
		}
	}
	secret := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret", "metadata": meta(), "type": "Opaque",
		"data": map[string]any{"token": base64.StdEncoding.EncodeToString([]byte(m.token))},
	}}
	receiver := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": ReceiverGVR.GroupVersion().String(), "kind": "Receiver", "metadata": meta(),
		"spec": map[string]any{
			"type":      "generic-hmac",
			"secretRef": map[string]any{"name": name},
			"resources": []any{map[string]any{"apiVersion": m.repo.APIVersion, "kind": "GitRepository", "name": m.repo.Name}},
		},
	}}
	opts := metav1.ApplyOptions{FieldManager: s.cfg.FieldManager, Force: true}
	if _, err := s.dyn.Resource(SecretGVR).Namespace(ns).Apply(ctx, name, secret, opts); err != nil {
		return fmt.Errorf("fluxreceiver: apply secret %s/%s: %w", ns, name, err)
	}
	if _, err := s.dyn.Resource(ReceiverGVR).Namespace(ns).Apply(ctx, name, receiver, opts); err != nil {
		return fmt.Errorf("fluxreceiver: apply receiver %s/%s: %w", ns, name, err)
	}
	return nil
}

// Run keeps the Receivers and Secrets the sink manages in place: when one
// is edited or deleted, it is written again (with the same token). It
// watches the objects labelled as ours in every namespace.
func (s *Sink) Run(ctx context.Context) error {
	if s.cfg.Mode != ModeReceiver {
		<-ctx.Done()
		return nil
	}
	factory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(s.dyn, 10*time.Minute, "", func(o *metav1.ListOptions) {
		o.LabelSelector = LabelManagedBy + "=" + s.cfg.FieldManager
	})
	kicked := make(chan struct{}, 1)
	kick := func() {
		select {
		case kicked <- struct{}{}:
		default:
		}
	}
	for _, res := range []schema.GroupVersionResource{ReceiverGVR, SecretGVR} {
		if _, err := factory.ForResource(res).Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			UpdateFunc: func(any, any) { kick() },
			DeleteFunc: func(any) { kick() },
		}); err != nil {
			return fmt.Errorf("fluxreceiver: %w", err)
		}
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-kicked:
		}
		s.mu.Lock()
		all := make([]*managed, 0, len(s.managed))
		for _, m := range s.managed {
			all = append(all, m)
		}
		s.mu.Unlock()
		for _, m := range all {
			actx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
			err := s.apply(actx, m)
			cancel()
			if err != nil && ctx.Err() == nil {
				logr.FromContextOrDiscard(ctx).Error(err, "keeping the receiver in place", "gitrepository", m.repo.Key())
			}
		}
	}
}
