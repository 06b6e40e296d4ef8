package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/source/webhook"
)

// program is the command run in the background by a test, with its
// git-sync metrics on a loopback port of its own.
type program struct {
	stderr syncBuffer
	done   chan int
	cancel context.CancelFunc
	addr   string
}

// start runs the command with args and --http-bind/--http-metrics; stop
// (or the test's end) ends it.
func start(t *testing.T, args ...string) *program {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &program{done: make(chan int, 1), addr: ln.Addr().String()}
	require.NoError(t, ln.Close())
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	args = append(args, "--http-bind", p.addr, "--http-metrics")
	go func() { p.done <- run(ctx, args, noEnv, &p.stderr) }()
	t.Cleanup(func() {
		if p.cancel != nil {
			p.stop()
		}
	})
	return p
}

// stop ends the command and returns its exit code.
func (p *program) stop() int {
	p.cancel()
	p.cancel = nil
	return <-p.done
}

// metric is the value of a git-sync metric (-1 while the endpoint does
// not answer, 0 before the series exists).
func (p *program) metric(name string) float64 {
	resp, err := http.Get("http://" + p.addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// periods waits until n more syncs have found nothing new (git-sync's
// noop count): the condition a test of what must not happen in between
// waits for, rather than a sleep.
func (p *program) periods(t *testing.T, n float64) {
	t.Helper()
	const noop = `git_sync_count_total{status="noop"}`
	base := max(p.metric(noop), 0)
	require.Eventually(t, func() bool { return p.metric(noop) >= base+n }, 30*time.Second, 10*time.Millisecond,
		"%v polls with nothing new: %s", n, p.stderr.String())
}

// assertNotOnDisk fails the test for each file under root that holds
// secret.
func assertNotOnDisk(t *testing.T, root, secret string) {
	t.Helper()
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(secret)) {
				t.Errorf("the secret is on disk in %s", p)
			}
		}
		return nil
	})
}

// freeAddr is a loopback address nothing listens on, for the program to
// listen on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// postHint posts a generic push hint for repoURL, signed with secret, to
// the program's --hook-bind address, and returns the answer's status.
func postHint(t *testing.T, addr, secret, repoURL string) int {
	t.Helper()
	body := []byte(`{"repository": "` + repoURL + `"}`)
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/hooks", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("X-Signature", webhook.Sign(secret, body))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	return resp.StatusCode
}
