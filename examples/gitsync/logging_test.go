package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
)

// The logs are JSON lines as git-sync writes them (logr's funcr: ts,
// caller, level, msg, the values; an error's "error"), each a whole
// object a log pipeline parses; --log-format=text (or GITSYNC_LOG_FORMAT)
// keeps key=value lines.
func TestLogLines(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/app")
	repo.Commit(t, "0", gittest.File("f", "0"))
	var out bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"--repo", repo.URL(), "--root", t.TempDir(), "--one-time", "-v", "2",
		"--ssh-key-file", "/nonexistent"}, noEnv, &out), out.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.NotEmpty(t, lines)
	msgs := map[string]bool{}
	for _, line := range lines {
		var obj map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &obj), "a JSON object a line: %s", line)
		for _, k := range []string{"ts", "caller", "level", "msg"} {
			assert.Contains(t, obj, k, line)
		}
		msgs[obj["msg"].(string)] = true
	}
	assert.True(t, msgs["syncing"], "%v", msgs)

	for name, tc := range map[string]struct{ args, env []string }{
		"--log-format=text":       {args: []string{"--log-format=text"}},
		"GITSYNC_LOG_FORMAT=text": {env: []string{"GITSYNC_LOG_FORMAT=text"}},
	} {
		out.Reset()
		args := append([]string{"--repo", repo.URL(), "--root", t.TempDir(), "--one-time"}, tc.args...)
		require.Equal(t, 0, run(context.Background(), args, tc.env, &out), out.String())
		assert.Contains(t, out.String(), "level=INFO msg=syncing ", name)
	}
	out.Reset()
	assert.Equal(t, 2, run(context.Background(), []string{"--repo", "r", "--root", "/r", "--log-format=xml"}, noEnv, &out))
	assert.Contains(t, out.String(), "--log-format must be json or text")
}

// --error-file holds the sync's error as git-sync writes it: its logger's
// error payload, {"Msg", "Err", "Args": {"failCount"}}; a ref the remote
// lacks is said in git's words.
func TestErrorFile(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/app")
	repo.Commit(t, "0", gittest.File("f", "0"))
	root := t.TempDir()
	var out bytes.Buffer
	assert.Equal(t, 1, run(context.Background(), []string{"--repo", repo.URL(), "--root", root, "--one-time", "--ref", "nope",
		"--error-file", "error.json"}, noEnv, &out))
	data, err := os.ReadFile(filepath.Join(root, "error.json"))
	require.NoError(t, err, out.String())
	var payload struct {
		Msg, Err string
		Args     map[string]any
	}
	require.NoError(t, json.Unmarshal(data, &payload), string(data))
	assert.Equal(t, "error syncing repo, will retry", payload.Msg)
	assert.Contains(t, payload.Err, "couldn't find remote ref nope")
	assert.Equal(t, float64(1), payload.Args["failCount"], string(data))
}
