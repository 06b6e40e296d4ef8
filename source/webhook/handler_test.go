package webhook_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/source/webhook"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, gittest.LeakOptions...) }

var secrets = webhook.Config{
	GitHubSecret: "gh-secret", GitLabToken: "gl-token", GiteaSecret: "gitea-secret",
	GogsSecret: "gogs-secret", BitbucketSecret: "bb-secret", GenericSecret: "generic-secret",
}

func mac(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// delivery is a provider's webhook request as the provider sends it.
type delivery struct {
	provider, fixture string
	headers           func(body []byte) map[string]string
}

var deliveries = []delivery{
	{"github", "github_push.json", func(b []byte) map[string]string {
		return map[string]string{"X-GitHub-Event": "push", "X-GitHub-Delivery": "72d3162e", "X-Hub-Signature-256": "sha256=" + mac("gh-secret", b)}
	}},
	{"gitlab", "gitlab_push.json", func([]byte) map[string]string {
		return map[string]string{"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": "gl-token"}
	}},
	{"gitlab tag", "gitlab_tag_push.json", func([]byte) map[string]string {
		return map[string]string{"X-Gitlab-Event": "Tag Push Hook", "X-Gitlab-Token": "gl-token"}
	}},
	{"gitea", "gitea_push.json", func(b []byte) map[string]string {
		// Gitea sends GitHub's and Gogs' headers too, with its own signature.
		return map[string]string{
			"X-Gitea-Event": "push", "X-Gogs-Event": "push", "X-GitHub-Event": "push",
			"X-Gitea-Signature": mac("gitea-secret", b), "X-Gogs-Signature": mac("gitea-secret", b),
		}
	}},
	{"forgejo", "gitea_push.json", func(b []byte) map[string]string {
		return map[string]string{"X-Forgejo-Event": "push", "X-Gitea-Event": "push", "X-Forgejo-Signature": mac("gitea-secret", b), "X-Gitea-Signature": mac("gitea-secret", b)}
	}},
	{"gogs", "gogs_push.json", func(b []byte) map[string]string {
		return map[string]string{"X-Gogs-Event": "push", "X-Gogs-Signature": mac("gogs-secret", b)}
	}},
	{"bitbucket cloud", "bitbucket_cloud_push.json", func(b []byte) map[string]string {
		return map[string]string{"X-Event-Key": "repo:push", "X-Hook-UUID": "c0ffee", "X-Hub-Signature": "sha256=" + mac("bb-secret", b)}
	}},
	{"bitbucket server", "bitbucket_server_refs_changed.json", func(b []byte) map[string]string {
		return map[string]string{"X-Event-Key": "repo:refs_changed", "X-Request-Id": "abc", "X-Hub-Signature": "sha256=" + mac("bb-secret", b)}
	}},
	{"generic", "generic.json", func(b []byte) map[string]string {
		return map[string]string{"X-Signature": "sha256=" + mac("generic-secret", b)}
	}},
}

// fixture reads a payload with the repository's URLs filled in.
func fixture(t testing.TB, name, httpURL string) []byte {
	data, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	web := strings.TrimSuffix(httpURL, ".git")
	rest := web[strings.Index(web, "://")+3:]
	host, full, _ := strings.Cut(rest, "/")
	r := strings.NewReplacer(
		"{{HTTP_URL}}", httpURL, "{{WEB_URL}}", web, "{{HOST}}", host,
		"{{SSH_URL}}", "git@"+strings.Split(host, ":")[0]+":"+full+".git",
		"{{FULL_NAME}}", full, "{{NAME}}", filepath.Base(full))
	return []byte(r.Replace(string(data)))
}

func post(h http.Handler, body []byte, headers map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/hooks", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// Each provider's signed push, end to end: webhook → Trigger → poll →
// delivery, with the watcher otherwise polling once an hour.
func TestProvidersEndToEnd(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/app")
	repo.Commit(t, "1", gittest.File("deploy/app.yaml", "v1"))
	sink := watchertest.NewSink("rec")
	w := watcher.New(watcher.WithCacheDir(t.TempDir()), watcher.WithInterval(time.Hour))
	require.NoError(t, w.Route(watchertest.NewSource(watcher.Target{ID: "app", URL: repo.URL(), Path: "deploy"}), sink))
	watchertest.Run(t, w.Run)
	sink.WaitDelivered(t, 1)

	cfg := secrets
	cfg.MinInterval = time.Nanosecond // one push each, no coalescing here
	h, err := webhook.New(cfg, w)
	require.NoError(t, err)
	defer h.Close()
	for i, d := range deliveries {
		t.Run(d.provider, func(t *testing.T) {
			commit := repo.Commit(t, d.provider, gittest.File("deploy/app.yaml", "v"+string(rune('a'+i))))
			body := fixture(t, d.fixture, repo.URL())
			rec := post(h, body, d.headers(body))
			require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
			assert.Contains(t, rec.Body.String(), "poll scheduled")
			sink.WaitCommit(t, "app", hash(commit))
		})
	}
}

// recorder is a Triggerer that records hints; it watches one key.
type recorder struct {
	mu      sync.Mutex
	calls   []string
	watched string
	called  chan struct{}
}

func (r *recorder) Trigger(url string) bool {
	r.mu.Lock()
	r.calls = append(r.calls, url)
	r.mu.Unlock()
	if r.called != nil {
		r.called <- struct{}{}
	}
	return strings.Contains(url, r.watched)
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

func TestRejections(t *testing.T) {
	rec := &recorder{watched: "g/app"}
	cfg := webhook.Config{GitHubSecret: "gh-secret", GitLabToken: "gl-token"}
	h, err := webhook.New(cfg, rec)
	require.NoError(t, err)
	defer h.Close()
	body := fixture(t, "github_push.json", "https://git.example.com/g/app.git")
	good := deliveries[0].headers(body)

	for _, tc := range []struct {
		name    string
		body    []byte
		headers map[string]string
		status  int
	}{
		{"missing signature", body, map[string]string{"X-GitHub-Event": "push"}, http.StatusUnauthorized},
		{"wrong signature", body, map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + mac("guess", body)}, http.StatusForbidden},
		{"not hex", body, map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=zz"}, http.StatusForbidden},
		{"sha1 form", body, map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha1=" + mac("gh-secret", body)}, http.StatusForbidden},
		{"replayed with an altered body", bytes.Replace(body, []byte("g/app"), []byte("g/evil"), 1), good, http.StatusForbidden},
		{"wrong gitlab token", body, map[string]string{"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": "nope"}, http.StatusForbidden},
		{"missing gitlab token", body, map[string]string{"X-Gitlab-Event": "Push Hook"}, http.StatusUnauthorized},
		{"provider not enabled", body, map[string]string{"X-Gogs-Event": "push", "X-Gogs-Signature": mac("x", body)}, http.StatusForbidden},
		{"no provider", body, map[string]string{"X-Whatever": "1"}, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := post(h, tc.body, tc.headers)
			assert.Equal(t, tc.status, got.Code, got.Body.String())
		})
	}
	assert.Zero(t, rec.count(), "nothing was triggered by a rejected request")

	big := bytes.Repeat([]byte(" "), 2<<20)
	got := post(h, big, map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + mac("gh-secret", big)})
	assert.Equal(t, http.StatusRequestEntityTooLarge, got.Code)

	req := httptest.NewRequest(http.MethodGet, "/hooks", nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	assert.Equal(t, http.StatusMethodNotAllowed, w.Code)

	ping := fixture(t, "github_ping.json", "https://git.example.com/g/app.git")
	got = post(h, ping, map[string]string{"X-GitHub-Event": "ping", "X-Hub-Signature-256": "sha256=" + mac("gh-secret", ping)})
	assert.Equal(t, http.StatusOK, got.Code, "unknown events are acknowledged")
	assert.Zero(t, rec.count())

	garbage := []byte("{not json")
	got = post(h, garbage, map[string]string{"X-GitHub-Event": "push", "X-Hub-Signature-256": "sha256=" + mac("gh-secret", garbage)})
	assert.Equal(t, http.StatusBadRequest, got.Code)

	// A signed push for a repository nobody watches triggers no poll.
	other := fixture(t, "github_push.json", "https://git.example.com/g/other.git")
	got = post(h, other, deliveries[0].headers(other))
	assert.Equal(t, http.StatusAccepted, got.Code)
	assert.Contains(t, got.Body.String(), "not watched")

	_, err = webhook.New(webhook.Config{}, rec)
	require.ErrorIs(t, err, webhook.ErrNoSecret)
}

// A burst of pushes to one repository becomes one hint now and one at the
// end of the interval (fake time in a synctest bubble).
func TestBurstIsCoalesced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{watched: "g/app", called: make(chan struct{}, 200)}
		h, err := webhook.New(webhook.Config{GitHubSecret: "gh-secret", MinInterval: time.Second}, rec)
		require.NoError(t, err)
		defer h.Close()
		body := fixture(t, "github_push.json", "https://git.example.com/g/app.git")
		hdr := deliveries[0].headers(body)
		for range 100 {
			require.Equal(t, http.StatusAccepted, post(h, body, hdr).Code)
		}
		// Each push names four URLs of one repository: one key, one hint.
		assert.Equal(t, 1, rec.count())
		<-rec.called
		<-rec.called // the coalesced one, when the bubble's clock reaches it
		assert.Equal(t, 2, rec.count())
		synctest.Wait()
		assert.Equal(t, 2, rec.count(), "100 pushes, 2 hints")
	})
}

// A signed payload naming more repositories than MaxURLs is refused before
// any is triggered; duplicates count once.
func TestTooManyURLsAreRefused(t *testing.T) {
	rec := &recorder{watched: "g/app"}
	h, err := webhook.New(webhook.Config{GenericSecret: "s", MaxURLs: 100, MaxBodyBytes: 4 << 20}, rec)
	require.NoError(t, err)
	defer h.Close()
	send := func(urls []string) *httptest.ResponseRecorder {
		body, err := json.Marshal(map[string][]string{"repositories": urls})
		require.NoError(t, err)
		return post(h, body, map[string]string{"X-Signature": webhook.Sign("s", body)})
	}
	var many []string
	for i := range 45_000 {
		many = append(many, fmt.Sprintf("https://git.example.com/g/r%d.git", i))
	}
	got := send(many)
	assert.Equal(t, http.StatusBadRequest, got.Code)
	assert.Contains(t, got.Body.String(), "45000 repository URLs, more than the limit of 100")
	assert.Zero(t, rec.count())

	dup := slices.Repeat([]string{"https://git.example.com/g/app.git"}, 45_000)
	got = send(dup)
	assert.Equal(t, http.StatusAccepted, got.Code, got.Body.String())
	assert.Equal(t, 1, rec.count())
}
