package fluxtest

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	notifyv1 "github.com/fluxcd/notification-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

var receivers = schema.GroupVersionResource{Group: "notification.toolkit.fluxcd.io", Version: "v1", Resource: "receivers"}

// TB is what the helpers need of a test.
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
}

// Hit is one request the receiver answered.
type Hit struct {
	Path   string
	Status int
	// Receiver is "namespace/name" of the Receiver it reached, if any.
	Receiver string
	Body     []byte
}

// Receiver is the notification-controller's webhook receiver.
type Receiver struct {
	// URL is the base URL to give the sink.
	URL string
	// OnAccepted is called after an accepted request annotated its
	// resources, with each resource's namespace and name (set it before
	// requests arrive). Tests use it to play source-controller.
	OnAccepted func(namespace, name string)

	dyn      dynamic.Interface
	kube     kubernetes.Interface
	accepted atomic.Int64
	mu       sync.Mutex
	hits     []Hit
}

// Start starts the receiver and the status role in the namespaces of the
// Receivers it sees; both stop when the test ends.
func Start(t TB, dyn dynamic.Interface, kube kubernetes.Interface) *Receiver {
	t.Helper()
	r := &Receiver{dyn: dyn, kube: kube}
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	r.URL = srv.URL
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.statusRole(ctx, t)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		srv.Close()
	})
	return r
}

// Hits returns the requests answered so far.
func (r *Receiver) Hits() []Hit {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Hit(nil), r.hits...)
}

// Accepted counts the requests answered 200.
func (r *Receiver) Accepted() int64 { return r.accepted.Load() }

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	hit := Hit{Path: req.URL.Path}
	defer func() {
		r.mu.Lock()
		r.hits = append(r.hits, hit)
		r.mu.Unlock()
	}()
	fail := func(code int, msg string) {
		hit.Status = code
		http.Error(w, msg, code)
	}
	if req.Method != http.MethodPost || !strings.HasPrefix(req.URL.Path, notifyv1.ReceiverWebhookPath) {
		fail(http.StatusNotFound, "not a receiver path")
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		fail(http.StatusBadRequest, err.Error())
		return
	}
	hit.Body = body
	rcv, token, ok := r.find(req.Context(), req.URL.Path)
	if !ok {
		fail(http.StatusNotFound, "no receiver for this path")
		return
	}
	hit.Receiver = rcv.Namespace + "/" + rcv.Name
	if rcv.Spec.Type != notifyv1.GenericHMACReceiver {
		fail(http.StatusBadRequest, "this test receiver serves generic-hmac only")
		return
	}
	sig := req.Header.Get("X-Signature")
	if sig == "" {
		fail(http.StatusBadRequest, "missing X-Signature header")
		return
	}
	if !validSignature(sig, body, token) {
		fail(http.StatusUnauthorized, "invalid X-Signature")
		return
	}
	// As notification-controller does: ask each resource to reconcile.
	for _, res := range rcv.Spec.Resources {
		gv, _ := schema.ParseGroupVersion(res.APIVersion)
		ns := res.Namespace
		if ns == "" {
			ns = rcv.Namespace
		}
		patch := []byte(`{"metadata":{"annotations":{"reconcile.fluxcd.io/requestedAt":"` + time.Now().UTC().Format(time.RFC3339Nano) + `"}}}`)
		if _, err := r.dyn.Resource(gv.WithResource(plural(res.Kind))).Namespace(ns).Patch(req.Context(), res.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			fail(http.StatusInternalServerError, err.Error())
			return
		}
		if r.OnAccepted != nil {
			r.OnAccepted(ns, res.Name)
		}
	}
	hit.Status = http.StatusOK
	r.accepted.Add(1)
	w.WriteHeader(http.StatusOK)
}

// validSignature checks "sha256=<hex HMAC>" (also sha1 and sha512 are
// Flux's; the test receiver takes sha256 only).
func validSignature(sig string, body []byte, token string) bool {
	hexSum, ok := strings.CutPrefix(sig, "sha256=")
	if !ok {
		return false
	}
	got, err := hex.DecodeString(hexSum)
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, []byte(token))
	mac.Write(body)
	return hmac.Equal(got, mac.Sum(nil))
}

// find returns the Receiver whose webhook path, computed by Flux's
// GetWebhookPath from the token in its Secret, is path.
func (r *Receiver) find(ctx context.Context, path string) (*notifyv1.Receiver, string, bool) {
	list, err := r.dyn.Resource(receivers).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, "", false
	}
	for _, item := range list.Items {
		rcv, token, ok := r.load(ctx, &item)
		if ok && rcv.GetWebhookPath(token) == path {
			return rcv, token, true
		}
	}
	return nil, "", false
}

// load reads a Receiver and the token of its Secret.
func (r *Receiver) load(ctx context.Context, u *unstructured.Unstructured) (*notifyv1.Receiver, string, bool) {
	rcv := &notifyv1.Receiver{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, rcv); err != nil {
		return nil, "", false
	}
	sec, err := r.kube.CoreV1().Secrets(rcv.Namespace).Get(ctx, rcv.Spec.SecretRef.Name, metav1.GetOptions{})
	if err != nil {
		return nil, "", false
	}
	return rcv, string(sec.Data["token"]), len(sec.Data["token"]) > 0
}

// statusRole sets status.webhookPath and Ready on every Receiver, as
// notification-controller does, whenever a Receiver or a Secret changes.
func (r *Receiver) statusRole(ctx context.Context, t TB) {
	kick := make(chan struct{}, 1)
	poke := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	handler := cache.ResourceEventHandlerFuncs{AddFunc: func(any) { poke() }, UpdateFunc: func(any, any) { poke() }}
	factory := dynamicinformer.NewDynamicSharedInformerFactory(r.dyn, 0)
	// A Receiver changes, or a Secret under one (its token edited).
	for _, gvr := range []schema.GroupVersionResource{receivers, {Version: "v1", Resource: "secrets"}} {
		_, _ = factory.ForResource(gvr).Informer().AddEventHandler(handler)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
		}
		list, err := r.dyn.Resource(receivers).List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		for _, item := range list.Items {
			rcv, token, ok := r.load(ctx, &item)
			if !ok {
				continue
			}
			path := rcv.GetWebhookPath(token)
			if cur, _, _ := unstructured.NestedString(item.Object, "status", "webhookPath"); cur == path {
				continue
			}
			_ = unstructured.SetNestedField(item.Object, path, "status", "webhookPath")
			_ = unstructured.SetNestedSlice(item.Object, []any{map[string]any{
				"type": "Ready", "status": "True", "reason": "Succeeded", "message": "Receiver initialized for path: " + path,
				"lastTransitionTime": time.Now().UTC().Format(time.RFC3339), "observedGeneration": item.GetGeneration(),
			}}, "status", "conditions")
			if _, err := r.dyn.Resource(receivers).Namespace(item.GetNamespace()).UpdateStatus(ctx, &item, metav1.UpdateOptions{}); err != nil && ctx.Err() == nil {
				t.Logf("fluxtest: receiver status: %v", err)
			}
		}
	}
}

// plural is the resource of a Flux kind ("GitRepository" → "gitrepositories").
func plural(kind string) string {
	k := strings.ToLower(kind)
	if strings.HasSuffix(k, "y") {
		return strings.TrimSuffix(k, "y") + "ies"
	}
	return k + "s"
}
