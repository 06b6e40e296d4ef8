package webhook

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/modwatch/modwatch/gitutil"
)

// SSE is a Stream over server-sent events. Subscribe POSTs
// {"repositories": [URL...]} to the endpoint, with a bearer token when one
// is set, and reads a text/event-stream answer:
//
//	event: hint
//	data: {"repository": "https://git.example.com/platform/app.git"}
//
// Comment lines (": ping") keep an idle connection alive; an event named
// "close" (data {"reason": ...}) or the end of the body ends the stream
// cleanly. A stream silent for longer than the idle timeout is an error.
type SSE struct {
	url         string
	client      *http.Client
	token       string
	idleTimeout time.Duration
}

var _ Stream = (*SSE)(nil)

// SSEConfig configures an SSE stream.
type SSEConfig struct {
	// URL is the subscription endpoint (a [Hub]'s), http or https.
	URL string `json:"url"`
	// Token, when set, is sent as "Authorization: Bearer <token>".
	Token string `json:"token,omitempty"`
	// IdleTimeout is how long the stream may be silent, keep-alives
	// included, before it is considered dead (default 90s).
	IdleTimeout time.Duration `json:"idleTimeout,omitempty"`
	// HTTPClient is the client (default: one whose transport bounds the
	// connection and the wait for response headers to 30s; the stream
	// itself has no overall timeout).
	HTTPClient *http.Client `json:"-"`
}

// Default fills in what is left at zero.
func (c *SSEConfig) Default() {
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 90 * time.Second
	}
	if c.HTTPClient == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.ResponseHeaderTimeout = 30 * time.Second
		c.HTTPClient = &http.Client{Transport: tr}
	}
}

// Validate checks the configuration: an http or https URL with a host, and
// no negative timeout.
func (c SSEConfig) Validate() error {
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("webhook: SSE url %q is not an http or https URL", gitutil.RedactURL(c.URL))
	}
	if c.IdleTimeout < 0 {
		return errors.New("webhook: SSE idleTimeout cannot be negative")
	}
	return nil
}

// NewSSE returns a stream from the subscription endpoint cfg.URL.
func NewSSE(cfg SSEConfig) (*SSE, error) {
	cfg.Default()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &SSE{url: cfg.URL, client: cfg.HTTPClient, token: cfg.Token, idleTimeout: cfg.IdleTimeout}, nil
}

// maxEventBytes bounds one event's data.
const maxEventBytes = 64 << 10

// Subscribe implements Stream.
func (s *SSE) Subscribe(ctx context.Context, repos []string, hint func(string)) error {
	body, err := json.Marshal(map[string][]string{"repositories": repos})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	idle := time.AfterFunc(s.idleTimeout, cancel)
	defer idle.Stop()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("webhook: subscribe %s: %w", gitutil.RedactURL(s.url), err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("webhook: subscribe %s: %w", gitutil.RedactURL(s.url), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("webhook: subscribe %s: %s: %s", gitutil.RedactURL(s.url), resp.Status, bytes.TrimSpace(msg))
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		return fmt.Errorf("webhook: subscribe %s: content type %q, want text/event-stream", gitutil.RedactURL(s.url), mt)
	}

	err = readEvents(resp.Body, hint, func() { idle.Reset(s.idleTimeout) })
	switch {
	case errors.Is(err, errClosed):
		return nil // the server said goodbye
	case errors.Is(err, io.EOF) && ctx.Err() == nil:
		return nil // the server ended the stream
	case ctx.Err() != nil && !idle.Stop():
		return fmt.Errorf("webhook: stream %s silent for %s", gitutil.RedactURL(s.url), s.idleTimeout)
	}
	return fmt.Errorf("webhook: stream %s: %w", gitutil.RedactURL(s.url), err)
}

// errClosed is returned by readEvents for a "close" event.
var errClosed = errors.New("stream closed by the server")

// readEvents reads a text/event-stream, calling hint for each hint and
// alive after each line. It returns errClosed on a "close" event, io.EOF at
// the end of the body, or the error that stopped it.
func readEvents(body io.Reader, hint func(string), alive func()) error {
	r := bufio.NewReaderSize(body, 4096)
	var event string
	var data bytes.Buffer
	for {
		line, err := readLine(r)
		if err != nil {
			return err
		}
		alive()
		switch {
		case line == "":
			if data.Len() > 0 || event != "" {
				if done := dispatch(event, data.Bytes(), hint); done {
					return errClosed
				}
			}
			event = ""
			data.Reset()
		case strings.HasPrefix(line, ":"):
			// keep-alive comment
		default:
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "event":
				event = value
			case "data":
				if data.Len()+len(value) > maxEventBytes {
					return fmt.Errorf("event larger than %d bytes", maxEventBytes)
				}
				if data.Len() > 0 {
					data.WriteByte('\n')
				}
				data.WriteString(value)
			}
		}
	}
}

// dispatch handles one event; it reports whether the stream is to end.
func dispatch(event string, data []byte, hint func(string)) bool {
	switch event {
	case "close":
		return true
	case "", "hint":
		var h struct {
			Repository string `json:"repository"`
		}
		if json.Unmarshal(data, &h) == nil && h.Repository != "" {
			hint(h.Repository)
		} else if u := strings.TrimSpace(string(data)); u != "" && !strings.HasPrefix(u, "{") {
			hint(u)
		}
	}
	return false
}

// readLine reads one line without its end ("\n" or "\r\n"), refusing
// lines longer than maxEventBytes.
func readLine(r *bufio.Reader) (string, error) {
	var b []byte
	for {
		chunk, isPrefix, err := r.ReadLine()
		if err != nil {
			return "", err
		}
		b = append(b, chunk...)
		if len(b) > maxEventBytes {
			return "", fmt.Errorf("line longer than %d bytes", maxEventBytes)
		}
		if !isPrefix {
			return string(b), nil
		}
	}
}
