package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"github.com/modwatch/modwatch/internal/dev/gittest"
)

// Every flag and variable of git-sync v4's is taken, with its meaning and
// its default (git-sync's main.go and env.go): none fails at start but
// the ones this program cannot honour, by name.
func TestGitSyncFlagsAndVariables(t *testing.T) {
	base := []string{"--repo", "https://h/r", "--root", "/git"}
	for _, tc := range []struct {
		name  string
		args  []string
		env   []string
		check func(t *testing.T, c config)
		err   string
	}{
		{name: "ssh defaults", check: func(t *testing.T, c config) {
			assert.Equal(t, []string{"/etc/git-secret/ssh"}, c.sshKeyFiles)
			assert.Equal(t, "/etc/git-secret/known_hosts", c.knownHosts)
			assert.True(t, c.sshKnownHosts, "host keys are checked by default")
			assert.Equal(t, 0, c.verbose)
		}},
		{name: "--ssh-known-hosts is a boolean", args: []string{"--ssh-known-hosts=false"}, check: func(t *testing.T, c config) { assert.False(t, c.sshKnownHosts) }},
		{name: "GITSYNC_SSH_KNOWN_HOSTS", env: []string{"GITSYNC_SSH_KNOWN_HOSTS=false"}, check: func(t *testing.T, c config) { assert.False(t, c.sshKnownHosts) }},
		{name: "GIT_SYNC_KNOWN_HOSTS", env: []string{"GIT_SYNC_KNOWN_HOSTS=false"}, check: func(t *testing.T, c config) { assert.False(t, c.sshKnownHosts) }},
		{name: "GIT_KNOWN_HOSTS", env: []string{"GIT_KNOWN_HOSTS=false"}, check: func(t *testing.T, c config) { assert.False(t, c.sshKnownHosts) }},
		{name: "the last variable set wins, as git-sync's", env: []string{"GITSYNC_SSH_KNOWN_HOSTS=false", "GIT_KNOWN_HOSTS=true"},
			check: func(t *testing.T, c config) { assert.True(t, c.sshKnownHosts) }},
		{name: "--ssh-key-file is repeatable", args: []string{"--ssh-key-file", "/a", "--ssh-key-file", "/b"},
			check: func(t *testing.T, c config) { assert.Equal(t, []string{"/a", "/b"}, c.sshKeyFiles) }},
		{name: "GITSYNC_SSH_KEY_FILE is a list", env: []string{"GITSYNC_SSH_KEY_FILE=/a:/b"},
			check: func(t *testing.T, c config) { assert.Equal(t, []string{"/a", "/b"}, c.sshKeyFiles) }},
		{name: "GIT_SSH_KEY_FILE", env: []string{"GIT_SSH_KEY_FILE=/v3"}, check: func(t *testing.T, c config) { assert.Equal(t, []string{"/v3"}, c.sshKeyFiles) }},
		{name: "the command line's keys replace the variable's", args: []string{"--ssh-key-file", "/c"}, env: []string{"GITSYNC_SSH_KEY_FILE=/a:/b"},
			check: func(t *testing.T, c config) { assert.Equal(t, []string{"/c"}, c.sshKeyFiles) }},
		{name: "GIT_SSH_KNOWN_HOSTS_FILE", env: []string{"GIT_SSH_KNOWN_HOSTS_FILE=/kh"}, check: func(t *testing.T, c config) { assert.Equal(t, "/kh", c.knownHosts) }},
		{name: "--verbose", args: []string{"--verbose", "3"}, check: func(t *testing.T, c config) { assert.Equal(t, 3, c.verbose) }},
		{name: "-v", args: []string{"-v", "4"}, check: func(t *testing.T, c config) { assert.Equal(t, 4, c.verbose) }},
		{name: "GITSYNC_VERBOSE", env: []string{"GITSYNC_VERBOSE=5"}, check: func(t *testing.T, c config) { assert.Equal(t, 5, c.verbose) }},
		{name: "--github-base-url is taken and said", args: []string{"--github-base-url", "https://ghe/api/v3/"},
			check: func(t *testing.T, c config) {
				assert.Contains(t, c.notes, "--github-base-url is used by GitHub App auth only, which this program does not take: not used")
			}},
		{name: "GITSYNC_GITHUB_BASE_URL", env: []string{"GITSYNC_GITHUB_BASE_URL=https://ghe/api/v3/"},
			check: func(t *testing.T, c config) { assert.Equal(t, "https://ghe/api/v3/", c.githubBaseURL) }},
		{name: "GIT_COOKIE_FILE=false is taken", env: []string{"GIT_COOKIE_FILE=false"}, check: func(t *testing.T, c config) { assert.False(t, c.cookieFile) }},
		{name: "GIT_COOKIE_FILE=true is refused by name", env: []string{"GIT_COOKIE_FILE=true"}, err: "--cookie-file (GITSYNC_COOKIE_FILE, GIT_COOKIE_FILE) is not supported"},
		{name: "--http-metrics needs --http-bind, as git-sync's", args: []string{"--http-metrics"}, err: "--http-bind must be specified"},
		{name: "--username needs a password, as git-sync's", args: []string{"--username", "u"}, err: "$GITSYNC_PASSWORD or --password-file must be specified"},
		{name: "a password needs --username, as git-sync's", args: []string{"--password-file", "/pw"}, err: "may only be specified when --username"},
		{name: "--period of at least 10ms, as git-sync's", args: []string{"--period", "5ms"}, err: "at least 10ms"},
		{name: "SSH settings of an https repository are said", args: []string{"--ssh-key-file", "/k"},
			check: func(t *testing.T, c config) {
				assert.Contains(t, c.notes, "--repo is not an SSH repository: the SSH settings serve its SSH submodules only")
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parse(append(append([]string{}, base...), tc.args...), tc.env, &bytes.Buffer{})
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			tc.check(t, c)
		})
	}
}

// --version, --man and --help print and exit 0, before any check (no
// --repo needed), as git-sync's.
func TestVersionManualHelp(t *testing.T) {
	for args, want := range map[string]string{"--version": "gitsync (modwatch) ", "--man": "--ssh-known-hosts, $GITSYNC_SSH_KNOWN_HOSTS, $GIT_SYNC_SSH_KNOWN_HOSTS, $GIT_SYNC_KNOWN_HOSTS, $GIT_KNOWN_HOSTS",
		"-?": "Usage: gitsync", "--help": "Usage: gitsync", "-h": "Usage: gitsync"} {
		var stdout, stderr bytes.Buffer
		assert.Equal(t, 0, runIO(context.Background(), []string{args}, noEnv, &stdout, &stderr), args)
		assert.Contains(t, stdout.String(), want, args)
		assert.Empty(t, stderr.String(), args)
	}
}

// sshKeyFile writes a new private key into dir and returns its path and
// public key.
func sshKeyFile(t *testing.T, dir, name string) (string, ssh.PublicKey) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	block, err := ssh.MarshalPrivateKey(priv, "")
	require.NoError(t, err)
	sshPub, err := ssh.NewPublicKey(pub)
	require.NoError(t, err)
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, pem.EncodeToMemory(block), 0o600))
	return p, sshPub
}

// An SSH repository is fetched with each --ssh-key-file offered in turn
// (the one the server knows is the second; one not there is skipped and
// said), host keys checked against --ssh-known-hosts-file.
func TestSSHKeysOfferedInTurn(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/app")
	c1 := repo.Commit(t, "0", gittest.File("f", "0"))
	secrets := t.TempDir()
	unknown, _ := sshKeyFile(t, secrets, "unknown")
	known, pub := sshKeyFile(t, secrets, "known")
	sshSrv := srv.StartSSH(t, pub)
	kh := filepath.Join(secrets, "known_hosts")
	require.NoError(t, os.WriteFile(kh, sshSrv.KnownHosts(), 0o600))
	missing := filepath.Join(secrets, "missing")
	root := t.TempDir()

	var out syncBuffer
	code := run(context.Background(), []string{"--repo", sshSrv.URL(repo.Name()), "--root", root, "--link", "app", "--one-time",
		"--ssh-key-file", missing, "--ssh-key-file", unknown, "--ssh-key-file", known, "--ssh-known-hosts-file", kh}, noEnv, &out)
	require.Equal(t, 0, code, out.String())
	assert.Equal(t, c1, gitOut(t, filepath.Join(root, "app"), "rev-parse", "HEAD"))
	assert.Contains(t, out.String(), "--ssh-key-file "+missing+" is not there: not offered")

	// A known_hosts that does not know the server's key: refused.
	other := filepath.Join(secrets, "other_hosts")
	require.NoError(t, os.WriteFile(other, []byte("[127.0.0.1]:1 "+string(ssh.MarshalAuthorizedKey(pub))), 0o600))
	var refused syncBuffer
	code = run(context.Background(), []string{"--repo", sshSrv.URL(repo.Name()), "--root", t.TempDir(), "--one-time",
		"--ssh-key-file", known, "--ssh-known-hosts-file", other}, noEnv, &refused)
	assert.Equal(t, 1, code, refused.String())
	// ... unless --ssh-known-hosts=false, as git-sync's StrictHostKeyChecking=no.
	var unchecked syncBuffer
	code = run(context.Background(), []string{"--repo", sshSrv.URL(repo.Name()), "--root", t.TempDir(), "--one-time",
		"--ssh-key-file", known, "--ssh-known-hosts-file", other, "--ssh-known-hosts=false"}, noEnv, &unchecked)
	assert.Equal(t, 0, code, unchecked.String())
}

// --add-user adds a passwd record for the uid when it has none, as
// git-sync's, and leaves one that has a record alone.
func TestAddUser(t *testing.T) {
	passwd := filepath.Join(t.TempDir(), "passwd")
	require.NoError(t, os.WriteFile(passwd, []byte("root:x:0:0::/root:/bin/sh\n"), 0o644))
	t.Setenv("HOME", "/home/x")
	require.NoError(t, addUser(passwd))
	data, err := os.ReadFile(passwd)
	require.NoError(t, err)
	if os.Getuid() == 0 {
		assert.Equal(t, "root:x:0:0::/root:/bin/sh\n", string(data), "root has its record")
		require.NoError(t, os.WriteFile(passwd, []byte("other:x:1:1::/:/bin/sh\n"), 0o644))
		require.NoError(t, addUser(passwd))
		data, err = os.ReadFile(passwd)
		require.NoError(t, err)
	}
	assert.Contains(t, string(data), fmt.Sprintf("git-sync:x:%d:%d::/home/x:/sbin/nologin\n", os.Getuid(), os.Getgid()))
}

// A rotated SSH key (the Secret's file rewritten in place) is used from
// the next period on, as ssh reads it at each of git-sync's fetches.
func TestSSHKeyRotated(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/app")
	repo.Commit(t, "0", gittest.File("f", "0"))
	secrets := t.TempDir()
	unknown, _ := sshKeyFile(t, secrets, "unknown")
	known, pub := sshKeyFile(t, secrets, "known")
	sshSrv := srv.StartSSH(t, pub)
	kh := filepath.Join(secrets, "known_hosts")
	require.NoError(t, os.WriteFile(kh, sshSrv.KnownHosts(), 0o600))
	root := t.TempDir()
	p := start(t, "--repo", sshSrv.URL(repo.Name()), "--root", root, "--link", "app", "--period", "100ms", "--max-failures", "-1",
		"--ssh-key-file", unknown, "--ssh-known-hosts-file", kh)
	require.Eventually(t, func() bool { return p.metric(`git_sync_count_total{status="error"}`) >= 1 }, 30*time.Second, 20*time.Millisecond, "%s", &p.stderr)
	key, err := os.ReadFile(known)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(unknown, key, 0o600))
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(filepath.Join(root, "app", "f"))
		return err == nil && string(data) == "0"
	}, 30*time.Second, 20*time.Millisecond, "%s", &p.stderr)
	assert.Equal(t, 0, p.stop(), p.stderr.String())
}
