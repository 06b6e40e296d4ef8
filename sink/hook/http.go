package hook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/watcher"
)

// Payload is the JSON body HTTP posts.
type Payload struct {
	Target string   `json:"target"`
	URL    string   `json:"url"`
	Path   string   `json:"path"`
	Ref    string   `json:"ref"`
	From   string   `json:"from,omitempty"`
	To     string   `json:"to"`
	Reason string   `json:"reason"`
	Paths  []string `json:"paths,omitempty"`
}

// HTTP posts each change as a JSON [Payload].
type HTTP struct {
	url          string
	client       *http.Client
	header       http.Header
	timeout      time.Duration
	method       string
	status       int  // the one status that is success, with statusSet
	statusSet    bool // (else any 2xx)
	commitHeader string
}

var (
	_ watcher.Sink  = (*HTTP)(nil)
	_ watcher.Namer = (*HTTP)(nil)
)

// HTTPOption configures an HTTP hook.
type HTTPOption func(*HTTP)

// WithClient sets the HTTP client (default: a client with no timeout of its
// own; the hook's timeout bounds each request).
func WithClient(c *http.Client) HTTPOption { return func(h *HTTP) { h.client = c } }

// WithHeader adds a header to every request (for instance Authorization).
func WithHeader(key, value string) HTTPOption {
	return func(h *HTTP) { h.header.Add(key, value) }
}

// WithHTTPTimeout bounds one request (default [DefaultTimeout]).
func WithHTTPTimeout(d time.Duration) HTTPOption {
	return func(h *HTTP) {
		if d > 0 {
			h.timeout = d
		}
	}
}

// WithMethod sets the request's method (default POST). A GET, HEAD,
// OPTIONS or DELETE request carries no body.
func WithMethod(method string) HTTPOption { return func(h *HTTP) { h.method = method } }

// WithSuccessStatus makes code the only answer that is a success (default:
// any 2xx); 0 takes any answer, so that only a request that gets none is
// retried (git-sync's --webhook-success-status, 0 its fire-and-forget).
func WithSuccessStatus(code int) HTTPOption {
	return func(h *HTTP) { h.status, h.statusSet = code, true }
}

// WithCommitHeader sets the header name to the change's commit in each
// request (git-sync's webhooks send Gitsync-Hash).
func WithCommitHeader(name string) HTTPOption { return func(h *HTTP) { h.commitHeader = name } }

// Post returns a sink that posts each change to url.
func Post(url string, opts ...HTTPOption) *HTTP {
	h := &HTTP{url: url, client: &http.Client{}, header: http.Header{}, timeout: DefaultTimeout, method: http.MethodPost}
	for _, o := range opts {
		o(h)
	}
	return h
}

// Name implements watcher.Namer.
func (h *HTTP) Name() string { return "http:" + gitutil.RedactURL(h.url) }

// Deliver sends the change; an answer other than the success status (by
// default any 2xx) is an error.
func (h *HTTP) Deliver(ctx context.Context, c watcher.Change) error {
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	req, err := h.request(ctx, c)
	if err != nil {
		return watcher.Permanent(err)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return fmt.Errorf("hook: post %s for %s: %w", gitutil.RedactURL(h.url), c.Target.ID, scrubURL(err, h.url))
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	ok := resp.StatusCode/100 == 2
	if h.statusSet {
		ok = h.status == 0 || resp.StatusCode == h.status
	}
	if !ok {
		return fmt.Errorf("hook: post %s for %s: %s: %s", gitutil.RedactURL(h.url), c.Target.ID, resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

// request is the request for c: its JSON Payload, unless the method takes
// no body.
func (h *HTTP) request(ctx context.Context, c watcher.Change) (*http.Request, error) {
	var body io.Reader
	switch h.method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodDelete:
	default:
		data, err := json.Marshal(Payload{
			Target: c.Target.ID, URL: gitutil.RedactURL(c.Target.URL), Path: c.Target.Path, Ref: c.Ref,
			From: commitText(c.From), To: c.To.String(), Reason: string(c.Reason), Paths: c.Paths,
		})
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, h.method, h.url, body)
	if err != nil {
		return nil, fmt.Errorf("hook: %s: %w", gitutil.RedactURL(h.url), err)
	}
	for k, vs := range h.header {
		req.Header[k] = vs
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if h.commitHeader != "" {
		req.Header.Set(h.commitHeader, c.To.String())
	}
	return req, nil
}

// scrubURL drops the raw URL (which may hold credentials) from a client
// error, which quotes it.
func scrubURL(err error, raw string) error {
	if red := gitutil.RedactURL(raw); red != raw {
		return fmt.Errorf("%s", bytes.ReplaceAll([]byte(err.Error()), []byte(raw), []byte(red)))
	}
	return err
}
