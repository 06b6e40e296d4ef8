package gitsync_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/dev/upstream"
	"github.com/modwatch/modwatch/source/gitsync"
	"github.com/modwatch/modwatch/watcher"
)

// numaplaneConfig is a controller configuration as Numaplane has it.
const numaplaneConfig = `clusterName: staging-1
syncTimeIntervalMs: 30000
cascadeDeletion: false
logLevel: 3
includedResources: "group=apps,kind=Deployment;group=,kind=ConfigMap"
automatedSyncDisabled: false
repoCredentials:
  - url: "git.example.com/platform"
    httpCredential:
      username: "deploy"
      password:
        fromKubernetesSecret: {name: http-creds, key: password, namespace: watcher-system}
  - url: "git@git.example.com:infra"
    sshCredential:
      SSHKey:
        fromKubernetesSecret: {name: ssh-creds, key: sshKey, namespace: watcher-system}
      knownHosts:
        fromKubernetesSecret: {name: ssh-creds, key: known_hosts, namespace: watcher-system}
    tls:
      insecureSkipVerify: false
`

// Numaplane's whole configuration is read, logLevel too (the program acts
// on it); a key of the program's own is refused unless it names it.
func TestParseControllerConfig(t *testing.T) {
	cfg, err := gitsync.ParseControllerConfig([]byte(numaplaneConfig))
	require.NoError(t, err)
	assert.Equal(t, "staging-1", cfg.ClusterName)
	assert.Equal(t, int64(30000), cfg.SyncTimeIntervalMs)
	assert.Len(t, cfg.RepoCredentials, 2)
	assert.Equal(t, "sshKey", cfg.RepoCredentials[1].SSHCredential.SSHKey.FromKubernetesSecret.Key)
	require.NotNil(t, cfg.LogLevel)
	assert.Equal(t, 3, *cfg.LogLevel)

	mine := numaplaneConfig + "tracingEndpoint: collector:4317\n"
	_, err = gitsync.ParseControllerConfig([]byte(mine))
	require.ErrorIs(t, err, gitsync.ErrInvalidConfig)
	assert.ErrorContains(t, err, "unknown keys (not Numaplane's, nor the program's own): tracingEndpoint")
	_, err = gitsync.ParseControllerConfig([]byte(mine), "tracingEndpoint")
	require.NoError(t, err)

	_, err = gitsync.ParseControllerConfig([]byte("logLevel: -1\n"))
	assert.ErrorContains(t, err, "logLevel -1 is negative")
}

func TestParseIncludedResources(t *testing.T) {
	got, err := gitsync.ParseIncludedResources("group=apps,kind=Deployment;group=,kind=ConfigMap; kind=, group=numaflow.numaproj.io ;")
	require.NoError(t, err)
	assert.Equal(t, gitsync.GroupKinds{{Group: "apps", Kind: "Deployment"}, {Kind: "ConfigMap"}, {Group: "numaflow.numaproj.io"}}, got)
	assert.True(t, got.Includes(schema.GroupKind{Group: "apps", Kind: "Deployment"}))
	assert.False(t, got.Includes(schema.GroupKind{Group: "apps", Kind: "StatefulSet"}))
	assert.True(t, got.Includes(schema.GroupKind{Group: "numaflow.numaproj.io", Kind: "Pipeline"}), "an empty kind: the whole group")
	assert.False(t, got.Includes(schema.GroupKind{Kind: "Secret"}))
	assert.True(t, gitsync.GroupKinds(nil).Includes(schema.GroupKind{Kind: "Secret"}), "none given: every kind")
	for _, bad := range []string{"apps", "group=apps", "group=apps,kind=A,kind=B", "group=apps,version=v1", "kind=A;group"} {
		_, err := gitsync.ParseIncludedResources(bad)
		assert.ErrorIs(t, err, gitsync.ErrInvalidConfig, bad)
	}
}

const (
	managerSample   = "numaplane/config/manager/controller-config.yaml"
	configMapSample = "numaplane/config/samples/config_map.yaml"
)

// The forms of Numaplane's own configuration samples, in the project's
// fixtures: every key is read or refused by name, never passed over.
func TestNumaplanesControllerConfigForms(t *testing.T) {
	read := func(rel string) []byte {
		t.Helper()
		data, err := upstream.FixtureConfig(rel)
		require.NoError(t, err)
		return data
	}
	cfg, err := gitsync.ParseControllerConfig(read(managerSample))
	require.NoError(t, err)
	assert.Equal(t, int64(45000), cfg.SyncTimeIntervalMs)
	kinds, err := gitsync.ParseIncludedResources(cfg.IncludedResources)
	require.NoError(t, err)
	assert.True(t, kinds.Includes(schema.GroupKind{Group: "apps", Kind: "Deployment"}))
	assert.True(t, kinds.Includes(schema.GroupKind{Group: "numaflow.numaproj.io", Kind: "Pipeline"}))
	assert.True(t, kinds.Includes(schema.GroupKind{Group: "batch", Kind: "CronJob"}))
	assert.False(t, kinds.Includes(schema.GroupKind{Group: "apps", Kind: "DaemonSet"}))

	sample := read(configMapSample)
	checkConfigMapSample(t, sample, "fixture-system")
}

// checkConfigMapSample checks what Numaplane's config/samples config map
// form gives (its Secrets in namespace ns): refused for the SSH credential
// without known hosts, and, with that fixed, for the Secret without a
// namespace.
func checkConfigMapSample(t *testing.T, sample []byte, ns string) {
	t.Helper()
	_, err := gitsync.ParseControllerConfig(sample)
	require.ErrorIs(t, err, gitsync.ErrInvalidConfig)
	assert.ErrorContains(t, err, "repoCredentials[1].sshCredential: no knownHosts")
	assert.ErrorContains(t, err, "insecureIgnoreHostKey: true")

	fixed := strings.Replace(string(sample), "          namespace: \""+ns+"\"\n    tls:", "          namespace: \""+ns+"\"\n      insecureIgnoreHostKey: true\n    tls:", 1)
	require.NotEqual(t, string(sample), fixed)
	_, err = gitsync.ParseControllerConfig([]byte(fixed))
	require.ErrorIs(t, err, gitsync.ErrInvalidConfig)
	assert.ErrorContains(t, err, "repoCredentials[2].httpCredential.password: fromKubernetesSecret needs name, key and namespace",
		"Numaplane fails at the first use of a Secret without namespace; this fails at load")
}

// Numaplane's own configuration samples, where they are, as its users have
// them: read as their fixtures are.
func TestNumaplanesOwnControllerConfigs(t *testing.T) {
	t.Run("manager", func(t *testing.T) {
		upstream.Require(t, managerSample)
		data, err := upstream.ConfigFile(managerSample)
		require.NoError(t, err)
		cfg, err := gitsync.ParseControllerConfig(data)
		require.NoError(t, err)
		kinds, err := gitsync.ParseIncludedResources(cfg.IncludedResources)
		require.NoError(t, err)
		assert.True(t, kinds.Includes(schema.GroupKind{Group: "apps", Kind: "Deployment"}))
		assert.False(t, kinds.Includes(schema.GroupKind{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}))
	})
	t.Run("config map", func(t *testing.T) {
		upstream.Require(t, configMapSample)
		data, err := upstream.ConfigFile(configMapSample)
		require.NoError(t, err)
		checkConfigMapSample(t, data, "numaplane-system")
	})
}

func TestParseControllerConfigErrors(t *testing.T) {
	tests := []struct{ name, in, err string }{
		{"not yaml", "repoCredentials: [\n", "line"},
		{"negative interval", "syncTimeIntervalMs: -5\n", "syncTimeIntervalMs"},
		{"no credential", "repoCredentials: [{url: git.example.com}]\n", "repoCredentials[0]: no httpCredential"},
		{"secret without namespace", "repoCredentials: [{url: h.com, httpCredential: {password: {fromKubernetesSecret: {name: a, key: b}}}}]\n", "repoCredentials[0].httpCredential.password: fromKubernetesSecret needs"},
		{"two sources", "repoCredentials: [{url: h.com, httpCredential: {password: {fromKubernetesSecret: {name: a, key: b, namespace: c}, fromFile: {jsonFilePath: x, key: y}}}}]\n", "both"},
		{"empty source", "repoCredentials: [{url: h.com, httpCredential: {password: {}}}]\n", "neither"},
		{"file with two paths", "repoCredentials: [{url: h.com, httpCredential: {password: {fromFile: {jsonFilePath: x, yamlFilePath: y, key: k}}}}]\n", "one of"},
		{"bad url", "repoCredentials: [{url: 'https://', httpCredential: {username: a}}]\n", "repoCredentials"},
		{"wrong type", "cascadeDeletion: often\n", "cascadeDeletion"},
		{"unknown key", "clusterName: a\nsyncInterval: 5\n", "unknown keys (not Numaplane's, nor the program's own): syncInterval"},
		{"unknown nested key", "repoCredentials: [{url: h.com, httpCredential: {username: a, user: b}}]\n", "unknown field"},
		{"ssh without known hosts", "repoCredentials: [{url: h.com, sshCredential: {SSHKey: {fromFile: {yamlFilePath: k, key: k}}}}]\n", "repoCredentials[0].sshCredential: no knownHosts"},
		{"ssh without key", "repoCredentials: [{url: h.com, sshCredential: {insecureIgnoreHostKey: true}}]\n", "no SSHKey"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := gitsync.ParseControllerConfig([]byte(tt.in))
			require.ErrorIs(t, err, gitsync.ErrInvalidConfig)
			assert.Contains(t, err.Error(), tt.err)
		})
	}
}

func FuzzParseControllerConfig(f *testing.F) {
	f.Add([]byte(numaplaneConfig))
	f.Add([]byte(`{"repoCredentials":[{"url":"h.com/a","tls":{"insecureSkipVerify":true}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := gitsync.ParseControllerConfig(data)
		if err != nil {
			return
		}
		if _, err := gitsync.NewCredentials(nil, cfg); err != nil {
			t.Fatalf("a parsed configuration gives no resolver: %v", err)
		}
	})
}

func TestCredentialsFromFilesAndLongestPrefix(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "creds.json"), []byte(`{"token": "s3cret"}`), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "creds.yaml"), []byte("key: |\n  -----BEGIN KEY-----\n"), 0o600))
	cfg, err := gitsync.ParseControllerConfig([]byte(`repoCredentials:
  - url: git.example.com
    httpCredential: {username: all, password: {fromFile: {jsonFilePath: ` + filepath.Join(dir, "creds.json") + `, key: token}}}
  - url: git.example.com/platform
    sshCredential: {SSHKey: {fromFile: {yamlFilePath: ` + filepath.Join(dir, "creds.yaml") + `, key: key}}, insecureIgnoreHostKey: true}
  - url: git.example.com/missing
    httpCredential: {password: {fromFile: {jsonFilePath: ` + filepath.Join(dir, "creds.json") + `, key: nope}}}
  - url: git.example.com/k8s
    httpCredential: {password: {fromKubernetesSecret: {name: a, key: b, namespace: c}}}
`))
	require.NoError(t, err)
	creds, err := gitsync.NewCredentials(nil, cfg)
	require.NoError(t, err)
	ctx := context.Background()

	a, err := creds.Resolve(ctx, "https://git.example.com/apps/web.git")
	require.NoError(t, err)
	assert.Equal(t, "all", a.Username)
	assert.Equal(t, "s3cret", a.Password)
	assert.NotEmpty(t, a.ID, "a rotated Secret keeps its mirror")

	a, err = creds.Resolve(ctx, "git@git.example.com:platform/control.git")
	require.NoError(t, err)
	assert.Equal(t, "-----BEGIN KEY-----\n", string(a.SSHPrivateKey), "the longest prefix wins, whatever the URL form")
	assert.True(t, a.InsecureIgnoreHostKey, "the explicit opt-in")

	_, err = creds.Resolve(ctx, "https://git.example.com/missing/r.git")
	assert.ErrorContains(t, err, `no string key "nope"`)
	assert.NotContains(t, err.Error(), "s3cret")
	_, err = creds.Resolve(ctx, "https://git.example.com/k8s/r.git")
	assert.ErrorContains(t, err, "no Kubernetes client")

	a, err = creds.Resolve(ctx, "https://other.example.com/r.git")
	require.NoError(t, err)
	assert.Nil(t, a, "no prefix: anonymous")
}

// NewController reads the file and says what it means for the watcher:
// the cache under persistentRepoClonePath, the resync unless
// autoHealDisabled; a broken file names itself.
func TestNewControllerFromAFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	cache := filepath.Join(dir, "cache")
	load := func(src gitsync.Config) (*gitsync.Controller, error) {
		return gitsync.NewController(nil, nil, gitsync.ControllerOptions{Path: path, Source: src})
	}
	require.NoError(t, os.WriteFile(path, []byte("clusterName: c1\nsyncTimeIntervalMs: 60000\npersistentRepoClonePath: "+cache+"\n"), 0o644))
	c, err := load(gitsync.Config{})
	require.NoError(t, err)
	assert.Equal(t, "c1", c.Config.ClusterName)
	assert.False(t, c.NeedLeaderElection(), "every replica follows the file")
	opts, err := c.WatcherOptions(filepath.Join(dir, "elsewhere"), nil)
	require.NoError(t, err)
	assert.Len(t, opts, 5, "mirrors, checkpoints, credentials, status, resync")
	assert.DirExists(t, filepath.Join(cache, "checkpoints"), "under persistentRepoClonePath")
	assert.NoDirExists(t, filepath.Join(dir, "elsewhere"))

	require.NoError(t, os.WriteFile(path, []byte("autoHealDisabled: true\n"), 0o644))
	c, err = load(gitsync.Config{})
	require.NoError(t, err)
	opts, err = c.WatcherOptions(filepath.Join(dir, "elsewhere"), nil)
	require.NoError(t, err)
	assert.Len(t, opts, 5, "the resync asks the configuration (off now) at each")
	assert.DirExists(t, filepath.Join(dir, "elsewhere", "checkpoints"))
	other := filepath.Join(dir, "other")
	_, err = c.WatcherOptions(other, watcher.NewMemoryStore())
	require.NoError(t, err)
	assert.NoDirExists(t, filepath.Join(other, "checkpoints"), "the program's store in place of the files")

	require.NoError(t, os.WriteFile(path, []byte("syncTimeIntervalMs: soon\n"), 0o644))
	_, err = load(gitsync.Config{})
	assert.ErrorContains(t, err, path)
	_, err = gitsync.NewController(nil, nil, gitsync.ControllerOptions{Path: filepath.Join(dir, "missing.yaml")})
	assert.Error(t, err)

	// What the file says is the file's: a Config that says it too is
	// refused, not overridden either way; so is a Controller with two
	// configurations or none.
	require.NoError(t, os.WriteFile(path, []byte("clusterName: c1\n"), 0o644))
	for name, cfg := range map[string]gitsync.Config{
		"cluster name": {Settings: gitsync.Settings{ClusterName: "c2"}},
		"suspend":      {Settings: gitsync.Settings{Suspend: true}},
		"credentials":  {Credentials: &gitsync.Credentials{}},
	} {
		_, err = load(cfg)
		assert.ErrorIs(t, err, gitsync.ErrInvalidConfig, name)
	}
	for name, o := range map[string]gitsync.ControllerOptions{
		"both":    {Path: path, Config: &gitsync.ControllerConfig{}},
		"neither": {},
		"resync":  {Path: path, ResyncEvery: -1},
		"invalid": {Config: &gitsync.ControllerConfig{SyncTimeIntervalMs: -1}},
	} {
		_, err = gitsync.NewController(nil, nil, o)
		assert.ErrorIs(t, err, gitsync.ErrInvalidConfig, name)
	}
	c, err = load(gitsync.Config{Namespace: "team-a", StatusFields: gitsync.StatusCommit})
	require.NoError(t, err)
	assert.NotNil(t, c.Source)
}

// One way to set the resync: ResyncEvery, in intervals of the
// configuration as it is at each resync; none while autoHealDisabled.
func TestTheResyncFollowsTheConfiguration(t *testing.T) {
	for _, tc := range []struct {
		name  string
		every int
		cfg   gitsync.ControllerConfig
		want  time.Duration
	}{
		{"default, a short interval", 0, gitsync.ControllerConfig{SyncTimeIntervalMs: 30000}, 10 * time.Minute},
		{"default, a long interval", 0, gitsync.ControllerConfig{SyncTimeIntervalMs: 120000}, 20 * time.Minute},
		{"Numaplane's: every interval", 1, gitsync.ControllerConfig{SyncTimeIntervalMs: 30000}, 30 * time.Second},
		{"every third, no interval said", 3, gitsync.ControllerConfig{}, 3 * time.Minute},
		{"autoHealDisabled", 1, gitsync.ControllerConfig{SyncTimeIntervalMs: 30000, AutoHealDisabled: true}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			c, err := gitsync.NewController(nil, nil, gitsync.ControllerOptions{Config: &cfg, ResyncEvery: tc.every})
			require.NoError(t, err)
			assert.Equal(t, tc.want, c.ResyncInterval())
		})
	}
	cfg := gitsync.ControllerConfig{SyncTimeIntervalMs: 30000}
	c, err := gitsync.NewController(nil, nil, gitsync.ControllerOptions{Config: &cfg, ResyncEvery: 1})
	require.NoError(t, err)
	require.NoError(t, c.Reload(&gitsync.ControllerConfig{SyncTimeIntervalMs: 5000}))
	assert.Equal(t, 5*time.Second, c.ResyncInterval(), "as the configuration says now")
}

// A program that follows the configuration itself hands the Controller
// each change: the live keys change, OnReload hears it, an invalid one is
// refused and the last stays; nothing follows a file.
func TestAProgramHandsTheControllerItsConfiguration(t *testing.T) {
	var heard []*gitsync.ControllerConfig
	var c *gitsync.Controller
	c, err := gitsync.NewController(nil, nil, gitsync.ControllerOptions{Config: &gitsync.ControllerConfig{ClusterName: "c1"},
		OnReload: func(cfg *gitsync.ControllerConfig, data []byte) {
			assert.Nil(t, data, "no file")
			if c != nil {
				assert.Same(t, cfg, c.Current(), "taken before it is told")
			}
			heard = append(heard, cfg)
		}})
	require.NoError(t, err)
	require.Len(t, heard, 1, "the first, from NewController")
	heard = nil
	level := 2
	next := &gitsync.ControllerConfig{ClusterName: "c1", CascadeDeletion: true, LogLevel: &level, IncludedResources: "group=,kind=ConfigMap"}
	require.NoError(t, c.Reload(next))
	assert.True(t, c.CascadeDeletion())
	assert.True(t, c.Included(schema.GroupKind{Kind: "ConfigMap"}))
	assert.False(t, c.Included(schema.GroupKind{Kind: "Service"}))
	assert.Equal(t, []*gitsync.ControllerConfig{next}, heard)

	err = c.Reload(&gitsync.ControllerConfig{IncludedResources: "kind"})
	require.ErrorIs(t, err, gitsync.ErrInvalidConfig)
	assert.Same(t, next, c.Current(), "the last good one stays")
	assert.Len(t, heard, 1)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.NoError(t, c.Start(ctx), "nothing to follow: Start waits for ctx")
}

// The keys Numaplane reads at each use are read when the file changes:
// cascadeDeletion (Controller.Current), automatedSyncDisabled, and
// logLevel (OnReload).
func TestControllerFollowsTheLiveKeys(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	write := func(s string) {
		tmp := path + ".tmp"
		require.NoError(t, os.WriteFile(tmp, []byte(s), 0o644))
		require.NoError(t, os.Rename(tmp, path))
	}
	write("clusterName: c1\ncascadeDeletion: false\nlogLevel: 1\n")
	reloaded := make(chan *gitsync.ControllerConfig, 4)
	c, err := gitsync.NewController(nil, nil, gitsync.ControllerOptions{Path: path,
		OnReload: func(cfg *gitsync.ControllerConfig, data []byte) {
			assert.Contains(t, string(data), "logLevel:", "the file's content")
			reloaded <- cfg
		}})
	require.NoError(t, err)
	assert.False(t, c.CascadeDeletion())
	assert.Equal(t, 1, *(<-reloaded).LogLevel, "the first, from NewController")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()

	// Written once: the change is taken whether Start's watch began
	// before it or after (its first read is compared with the start's).
	write("clusterName: c1\ncascadeDeletion: true\nautomatedSyncDisabled: true\nlogLevel: 4\n")
	select {
	case cfg := <-reloaded:
		assert.Equal(t, 4, *cfg.LogLevel, "the program reads logLevel again")
		assert.True(t, c.CascadeDeletion(), "cascadeDeletion as the file says now")
		assert.True(t, c.Current().AutomatedSyncDisabled)
		assert.False(t, c.Config.CascadeDeletion, "Config stays what it started with")
	case <-time.After(20 * time.Second):
		t.Fatal("the change was not taken within 20s")
	}
}

// Credentials go over plain http only where their entry opts in, by name;
// the refusal names the key that allows it, and no secret is read.
func TestCredentialsOverPlainHTTPAreOptedInByName(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "creds.json"), []byte(`{"token": "s3cret"}`), 0o600))
	file := filepath.Join(dir, "creds.json")
	cfg, err := gitsync.ParseControllerConfig([]byte(`repoCredentials:
  - url: git.dev.svc/platform
    httpCredential: {username: dev, password: {fromFile: {jsonFilePath: ` + file + `, key: token}}}
  - url: git.dev.svc/lab
    httpCredential: {username: dev, allowInsecureHTTP: true, password: {fromFile: {jsonFilePath: ` + file + `, key: token}}}
`))
	require.NoError(t, err)
	creds, err := gitsync.NewCredentials(nil, cfg)
	require.NoError(t, err)
	ctx := context.Background()

	_, err = creds.Resolve(ctx, "http://git.dev.svc/platform/apps.git")
	require.ErrorIs(t, err, gitutil.ErrInsecureCredentials)
	assert.ErrorContains(t, err, "httpCredential.allowInsecureHTTP")
	assert.NotContains(t, err.Error(), "s3cret")

	a, err := creds.Resolve(ctx, "https://git.dev.svc/platform/apps.git")
	require.NoError(t, err, "the same entry over https")
	assert.False(t, a.AllowInsecureHTTP)

	a, err = creds.Resolve(ctx, "http://git.dev.svc/lab/apps.git")
	require.NoError(t, err, "opted in")
	assert.True(t, a.AllowInsecureHTTP)
	assert.Equal(t, "s3cret", a.Password)
	_, err = gitsync.ParseControllerConfig([]byte("repoCredentials:\n  - url: x\n    httpCredential: {allowInsecure: true}\n"))
	assert.ErrorContains(t, err, "allowInsecure", "a misspelt key is refused by name")
}
