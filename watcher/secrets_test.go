package watcher_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/sink/hook"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/metrics"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// A run with credentials in target URLs, over a basic-auth git server,
// through success and every failure (wrong password, a server that answers
// 503, a refused connection), leaves no secret anywhere a person or another
// tenant could read it: the cache and store directories, the git CLI's
// command line (what ps shows), the logs, the metrics, the events and the
// hook's environment.
func TestNoSecretLeavesMemory(t *testing.T) {
	const user, password, rotated = "deploy", "pw-S3CRET-zq9", "pw-R0TATED-xk4"
	secrets := []string{password, rotated}
	for _, pw := range []string{password, rotated} {
		secrets = append(secrets, base64.StdEncoding.EncodeToString([]byte(user+":"+pw)))
	}
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/private")
	c1 := repo.Commit(t, "1", gittest.File("app.yaml", "v1"))
	srv.SetBasicAuth(user, password)

	// The git CLI makes first fetches; record its command lines.
	gitBin, err := exec.LookPath("git")
	require.NoError(t, err)
	tools := t.TempDir()
	argv := filepath.Join(tools, "argv")
	wrapper := filepath.Join(tools, "git")
	require.NoError(t, os.WriteFile(wrapper, fmt.Appendf(nil, "#!/bin/sh\necho \"$@\" >> %q\nexec %q \"$@\"\n", argv, gitBin), 0o755))
	envFile := filepath.Join(tools, "hook-env")

	cacheDir, storeDir := t.TempDir(), t.TempDir()
	store, err := watcher.NewFileStore(storeDir)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	require.NoError(t, err)
	var logs logLines
	obs := watchertest.NewObserver()
	w := newWatcherIn(t, obs, cacheDir, watcher.WithStore(store), watcher.WithGit(watcher.GoGit{GitCLI: wrapper}),
		watcher.WithObserver(m))
	insecure := &gitutil.Auth{AllowInsecureHTTP: true}
	good := watcher.Target{ID: "good", URL: withCredentials(repo.URL(), user, password), Auth: insecure}
	refused := watcher.Target{ID: "refused", URL: withCredentials("http://127.0.0.1:1/g/r.git", user, password), Auth: insecure}
	token := watcher.Target{ID: "token", URL: strings.Replace(repo.URL(), "://", "://"+password+"@", 1), Auth: insecure}
	sink := watchertest.NewSink("rec")
	exec := hook.Command("sh", []string{"-c", "env >> " + envFile})
	src := watchertest.NewSource(good, refused, token)
	require.NoError(t, w.Route(src, sink, exec))
	startLogging(t, w, logs.logger())

	sink.WaitCommit(t, "good", hash(c1))
	obs.WaitFor(t, "the refused connection", watchertest.Is(watcher.EventTargetFailed, "refused"))
	obs.WaitFor(t, "the token is not a user", watchertest.Is(watcher.EventTargetFailed, "token"))
	obs.WaitFor(t, "the hook", func(e watcher.Event) bool { return e.Type == watcher.EventDelivered && e.Sink == exec.Name() })

	// The server answers 503, then wants another password.
	srv.SetDown(true)
	pollNow(t, w, obs, repo.URL())
	srv.SetDown(false)
	srv.SetBasicAuth(user, rotated)
	repo.Commit(t, "2", gittest.File("app.yaml", "v2"))
	require.True(t, w.Trigger(repo.URL()))
	obs.WaitFor(t, "the wrong password", func(e watcher.Event) bool {
		return e.Type == watcher.EventTargetFailed && e.Target.ID == "good" && strings.Contains(e.Err.Error(), "authentication")
	})
	// The URL's credentials rotate too: delivered, with no secret kept.
	src.Set(watcher.Target{ID: "good", URL: withCredentials(repo.URL(), user, rotated), Auth: insecure}, refused, token)
	c3 := repo.Commit(t, "3", gittest.File("app.yaml", "v3"))
	pollNow(t, w, obs, repo.URL())
	sink.WaitCommit(t, "good", hash(c3))

	var places []string
	check := func(where, text string) {
		t.Helper()
		for _, s := range secrets {
			if strings.Contains(text, s) {
				places = append(places, where)
			}
		}
	}
	for _, dir := range []string{cacheDir, storeDir} {
		require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // a temporary file renamed meanwhile: the watcher still runs
			}
			require.NoError(t, err)
			check(p, p)
			if d.Type().IsRegular() {
				data, err := os.ReadFile(p)
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				require.NoError(t, err)
				check(p, string(data))
			}
			return nil
		}))
	}
	args, err := os.ReadFile(argv)
	require.NoError(t, err, "the git CLI made the first fetch")
	check("git command line", string(args))
	hookEnv, err := os.ReadFile(envFile)
	require.NoError(t, err)
	assert.Contains(t, string(hookEnv), "MODWATCH_URL="+repo.URL())
	check("hook environment", string(hookEnv))
	check("logs", logs.String())
	families, err := reg.Gather()
	require.NoError(t, err)
	check("metrics", fmt.Sprint(families))
	urls, _ := w.Remotes()
	check("Remotes", fmt.Sprint(urls))
	for _, e := range obs.Events() {
		check("event "+string(e.Type), e.String())
		if e.Target != nil {
			check("event target "+string(e.Type), e.Target.URL+fmt.Sprintf(" %v", *e.Target))
		}
		if e.Change != nil {
			check("change "+string(e.Type), e.Change.Target.URL)
		}
	}
	for _, c := range sink.Attempts() {
		check("change", c.Target.URL+fmt.Sprintf(" %v", c.Target))
	}
	assert.Empty(t, places, "a secret was found there")
	assert.Contains(t, logs.String(), "target failing", "failures reach the log")
}
