package fluxreceiver

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
	"github.com/modwatch/modwatch/watcher/signature"
)

// Mode is how Flux is told.
type Mode string

const (
	// ModeReceiver calls a Receiver the sink manages. The default.
	ModeReceiver Mode = "Receiver"
	// ModeAnnotate sets the GitRepository's requestedAt annotation.
	ModeAnnotate Mode = "Annotate"
)

// The resources the sink reads and writes.
var (
	ReceiverGVR = schema.GroupVersionResource{Group: "notification.toolkit.fluxcd.io", Version: "v1", Resource: "receivers"}
	SecretGVR   = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
)

// Labels and annotations.
const (
	// LabelManagedBy marks the Receivers and Secrets the sink manages.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// AnnotationRequestedAt is Flux's reconcile request annotation.
	AnnotationRequestedAt = "reconcile.fluxcd.io/requestedAt"
)

// Config is how the sink notifies Flux.
type Config struct {
	// Mode is ModeReceiver (default) or ModeAnnotate.
	Mode Mode
	// ReceiverURL is the base URL of notification-controller's webhook
	// receiver. Default "http://webhook-receiver.flux-system.svc.cluster.local"
	// (the Service Flux installs in front of the receiver's port).
	ReceiverURL string
	// FieldManager writes the Receivers, Secrets and annotations; it is
	// also the value of LabelManagedBy. Default "modwatch".
	FieldManager string
	// DisableConfirm skips watching status.artifact.revision.
	DisableConfirm bool
	// ConfirmTimeout is how long a notification may take to show in
	// status.artifact.revision before Flux is notified again. Default 1m.
	ConfirmTimeout time.Duration
	// MaxNotifications bounds the notifications of one change; after the
	// last unconfirmed one the delivery fails (and the watcher retries it
	// with backoff). Default 3.
	MaxNotifications int
	// ReadyTimeout bounds the wait for a new Receiver's
	// status.webhookPath. Default 1m.
	ReadyTimeout time.Duration
	// RequestTimeout bounds each POST. Default 10s.
	RequestTimeout time.Duration
}

// Default fills the unset fields.
func (c *Config) Default() {
	if c.Mode == "" {
		c.Mode = ModeReceiver
	}
	if c.ReceiverURL == "" {
		c.ReceiverURL = "http://webhook-receiver.flux-system.svc.cluster.local"
	}
	if c.FieldManager == "" {
		c.FieldManager = "modwatch"
	}
	if c.ConfirmTimeout == 0 {
		c.ConfirmTimeout = time.Minute
	}
	if c.MaxNotifications == 0 {
		c.MaxNotifications = 3
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = time.Minute
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 10 * time.Second
	}
}

// ErrInvalidConfig is returned (wrapped) by [Config.Validate].
var ErrInvalidConfig = errors.New("fluxreceiver: invalid config")

// Validate checks a defaulted Config.
func (c Config) Validate() error {
	switch {
	case c.Mode != ModeReceiver && c.Mode != ModeAnnotate:
		return fmt.Errorf("%w: mode %q is neither %s nor %s", ErrInvalidConfig, c.Mode, ModeReceiver, ModeAnnotate)
	case !strings.HasPrefix(c.ReceiverURL, "http://") && !strings.HasPrefix(c.ReceiverURL, "https://"):
		return fmt.Errorf("%w: receiver URL %q is not http(s)", ErrInvalidConfig, c.ReceiverURL)
	case c.ConfirmTimeout < 0 || c.ReadyTimeout < 0 || c.RequestTimeout < 0:
		return fmt.Errorf("%w: a timeout is negative", ErrInvalidConfig)
	case c.MaxNotifications < 0:
		return fmt.Errorf("%w: max notifications is negative", ErrInvalidConfig)
	}
	return nil
}

// gvr is the resource of repo's served version.
func gvr(repo payload.GitRepository) schema.GroupVersionResource {
	gv, _ := schema.ParseGroupVersion(repo.APIVersion)
	return gv.WithResource("gitrepositories")
}

// Sink notifies Flux.
type Sink struct {
	cfg  Config
	dyn  dynamic.Interface
	http *http.Client

	mu      sync.Mutex
	managed map[string]*managed // by GitRepository key, for Run to keep in place
}

// managed is what the sink keeps in place for one GitRepository.
type managed struct {
	repo  payload.GitRepository
	token string
}

var (
	_ watcher.Sink     = (*Sink)(nil)
	_ watcher.Remover  = (*Sink)(nil)
	_ watcher.Runnable = (*Sink)(nil)
)

// New returns a sink writing through dyn, configured by cfg alone.
func New(dyn dynamic.Interface, cfg Config) (*Sink, error) {
	cfg.Default()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Sink{cfg: cfg, dyn: dyn, managed: map[string]*managed{}}
	s.http = &http.Client{Timeout: cfg.RequestTimeout}
	return s, nil
}

// Name returns "fluxreceiver".
func (s *Sink) Name() string { return "fluxreceiver" }

func repoOf(t watcher.Target) (payload.GitRepository, error) {
	g, ok := payload.Of[payload.GitRepository](t)
	if !ok {
		return g, watcher.Permanent(fmt.Errorf("fluxreceiver: target %s: payload %T is not a payload.GitRepository", t.ID, t.Payload))
	}
	if err := g.Validate(); err != nil {
		return g, watcher.Permanent(fmt.Errorf("fluxreceiver: target %s: %w", t.ID, err))
	}
	return g, nil
}

// Deliver tells Flux about c and, unless disabled, waits until the
// GitRepository's artifact is at c.To, notifying again when it is stale.
func (s *Sink) Deliver(ctx context.Context, c watcher.Change) error {
	repo, err := repoOf(c.Target)
	if err != nil {
		return err
	}
	notify := func(ctx context.Context) error { return s.annotate(ctx, repo) }
	if s.cfg.Mode == ModeReceiver {
		m, path, err := s.ensure(ctx, repo)
		if err != nil {
			return err
		}
		notify = func(ctx context.Context) error { return s.post(ctx, path, m.token, c) }
	}
	if !s.cfg.DisableConfirm && s.current(ctx, repo, c.To.String()) {
		return nil // Flux has it already (a restart, or Flux was faster)
	}
	for n := 1; ; n++ {
		if err := notify(ctx); err != nil {
			return err
		}
		if s.cfg.DisableConfirm {
			return nil
		}
		err := s.confirm(ctx, repo, c.To.String())
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || !errors.Is(err, errStale) {
			return err
		}
		if n >= s.cfg.MaxNotifications {
			return fmt.Errorf("fluxreceiver: %s: %w after %d notifications", repo.Key(), err, n)
		}
		logr.FromContextOrDiscard(ctx).Info("artifact still stale: notifying again", "gitrepository", repo.Key(), "commit", c.To.String(), "notification", n+1)
	}
}

// post sends the signed notification.
func (s *Sink) post(ctx context.Context, path, token string, c watcher.Change) error {
	body, err := json.Marshal(map[string]string{
		"repository": gitutil.StripCredentials(c.Target.URL), "ref": c.Ref, "commit": c.To.String(),
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(s.cfg.ReceiverURL, "/")+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Signature", signature.HMAC(token, body))
	resp, err := s.http.Do(req)
	if err != nil {
		return fmt.Errorf("fluxreceiver: notify %s: %w", s.cfg.ReceiverURL, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fluxreceiver: notify %s: %s", s.cfg.ReceiverURL, resp.Status)
	}
	return nil
}

// WebhookPath is where notification-controller serves a Receiver:
// "/hook/" and the hex SHA-256 of token, name and namespace.
func WebhookPath(token, name, namespace string) string {
	sum := sha256.Sum256([]byte(token + name + namespace))
	return "/hook/" + hex.EncodeToString(sum[:])
}

// annotate asks Flux to reconcile the GitRepository now.
func (s *Sink) annotate(ctx context.Context, repo payload.GitRepository) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{AnnotationRequestedAt: time.Now().UTC().Format(time.RFC3339Nano)},
	}})
	_, err := s.dyn.Resource(gvr(repo)).Namespace(repo.Namespace).Patch(ctx, repo.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: s.cfg.FieldManager})
	if err != nil {
		return fmt.Errorf("fluxreceiver: annotate %s: %w", repo.Key(), err)
	}
	return nil
}

// current reports whether the GitRepository's artifact is at commit now.
func (s *Sink) current(ctx context.Context, repo payload.GitRepository, commit string) bool {
	u, err := s.dyn.Resource(gvr(repo)).Namespace(repo.Namespace).Get(ctx, repo.Name, metav1.GetOptions{})
	if err != nil {
		return false
	}
	rev, _, _ := unstructured.NestedString(u.Object, "status", "artifact", "revision")
	return revisionIs(rev, commit)
}

var errStale = errors.New("status.artifact.revision did not reach the commit")

// confirm waits until the GitRepository's artifact revision names commit.
func (s *Sink) confirm(ctx context.Context, repo payload.GitRepository, commit string) error {
	at := func(u *unstructured.Unstructured) bool {
		rev, _, _ := unstructured.NestedString(u.Object, "status", "artifact", "revision")
		return revisionIs(rev, commit)
	}
	err := s.waitFor(ctx, gvr(repo), repo.Namespace, repo.Name, s.cfg.ConfirmTimeout, at)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return errStale
	}
	return err
}

// revisionIs reports whether a Flux artifact revision ("main@sha1:<hash>",
// or "sha1:<hash>", or the older "main/<hash>") names commit.
func revisionIs(rev, commit string) bool {
	return commit != "" && (strings.HasSuffix(rev, "sha1:"+commit) || strings.HasSuffix(rev, "sha256:"+commit) || strings.HasSuffix(rev, "/"+commit) || rev == commit)
}

// waitFor watches one object until ok, timeout or ctx.
func (s *Sink) waitFor(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string, timeout time.Duration, ok func(*unstructured.Unstructured) bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := s.dyn.Resource(gvr).Namespace(namespace)
	for {
		u, err := client.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ok(u) {
			return nil
		}
		w, err := client.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: u.GetResourceVersion()})
		if err != nil {
			return err
		}
		done, err := func() (bool, error) {
			defer w.Stop()
			for {
				select {
				case <-ctx.Done():
					return false, ctx.Err()
				case ev, open := <-w.ResultChan():
					if !open {
						return false, nil // the watch ended: start again
					}
					if u, isObj := ev.Object.(*unstructured.Unstructured); isObj && ok(u) {
						return true, nil
					}
				}
			}
		}()
		if done || err != nil {
			return err
		}
	}
}

// Remove deletes the Receiver and Secret of the target's GitRepository
// (garbage collection removes them anyway when the GitRepository goes).
func (s *Sink) Remove(ctx context.Context, t watcher.Target) error {
	repo, err := repoOf(t)
	if err != nil {
		return nil // nothing of ours can exist
	}
	s.mu.Lock()
	delete(s.managed, repo.Key())
	s.mu.Unlock()
	if s.cfg.Mode != ModeReceiver {
		return nil
	}
	name := objectName(repo.Name)
	for _, gvr := range []schema.GroupVersionResource{ReceiverGVR, SecretGVR} {
		err := s.dyn.Resource(gvr).Namespace(repo.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("fluxreceiver: delete %s %s/%s: %w", gvr.Resource, repo.Namespace, name, err)
		}
	}
	return nil
}

func randomToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
