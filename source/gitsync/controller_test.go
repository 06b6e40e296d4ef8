package gitsync_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/modwatch/modwatch/internal/upstream"
	"github.com/modwatch/modwatch/source/gitsync"
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

func TestParseControllerConfig(t *testing.T) {
	cfg, err := gitsync.ParseControllerConfig([]byte(numaplaneConfig), "logLevel")
	require.NoError(t, err)
	assert.Equal(t, "staging-1", cfg.ClusterName)
	assert.Equal(t, int64(30000), cfg.SyncTimeIntervalMs)
	assert.Len(t, cfg.RepoCredentials, 2)
	assert.Equal(t, "sshKey", cfg.RepoCredentials[1].SSHCredential.SSHKey.FromKubernetesSecret.Key)

	_, err = gitsync.ParseControllerConfig([]byte(numaplaneConfig))
	require.ErrorIs(t, err, gitsync.ErrInvalidConfig)
	assert.ErrorContains(t, err, "logLevel (the program's log verbosity, which this package does not implement")
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
		{"unknown key", "clusterName: a\nsyncInterval: 5\n", "unknown keys: syncInterval (not a key of this package)"},
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

// LoadController reads the file and says what it means for the watcher:
// the cache under persistentRepoClonePath, the resync unless
// autoHealDisabled; a broken file names itself.
func TestLoadController(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	cache := filepath.Join(dir, "cache")
	require.NoError(t, os.WriteFile(path, []byte("clusterName: c1\nsyncTimeIntervalMs: 60000\npersistentRepoClonePath: "+cache+"\n"), 0o644))
	c, err := gitsync.LoadController(path, nil, nil, gitsync.Config{})
	require.NoError(t, err)
	assert.Equal(t, "c1", c.Config.ClusterName)
	assert.False(t, c.NeedLeaderElection(), "every replica follows the file")
	opts, err := c.WatcherOptions(filepath.Join(dir, "elsewhere"))
	require.NoError(t, err)
	assert.Len(t, opts, 5, "mirrors, checkpoints, credentials, status, resync")
	assert.DirExists(t, filepath.Join(cache, "checkpoints"), "under persistentRepoClonePath")
	assert.NoDirExists(t, filepath.Join(dir, "elsewhere"))

	require.NoError(t, os.WriteFile(path, []byte("autoHealDisabled: true\n"), 0o644))
	c, err = gitsync.LoadController(path, nil, nil, gitsync.Config{})
	require.NoError(t, err)
	opts, err = c.WatcherOptions(filepath.Join(dir, "elsewhere"))
	require.NoError(t, err)
	assert.Len(t, opts, 5, "the resync asks the configuration (off now) at each")
	assert.DirExists(t, filepath.Join(dir, "elsewhere", "checkpoints"))

	require.NoError(t, os.WriteFile(path, []byte("syncTimeIntervalMs: soon\n"), 0o644))
	_, err = gitsync.LoadController(path, nil, nil, gitsync.Config{})
	assert.ErrorContains(t, err, path)
	_, err = gitsync.LoadController(filepath.Join(dir, "missing.yaml"), nil, nil, gitsync.Config{})
	assert.Error(t, err)

	// What the file says is the file's: a Config that says it too is
	// refused, not overridden either way.
	require.NoError(t, os.WriteFile(path, []byte("clusterName: c1\n"), 0o644))
	for name, cfg := range map[string]gitsync.Config{
		"cluster name": {Settings: gitsync.Settings{ClusterName: "c2"}},
		"suspend":      {Settings: gitsync.Settings{Suspend: true}},
		"credentials":  {Credentials: &gitsync.Credentials{}},
	} {
		_, err = gitsync.LoadController(path, nil, nil, cfg)
		assert.ErrorIs(t, err, gitsync.ErrInvalidConfig, name)
	}
	c, err = gitsync.LoadController(path, nil, nil, gitsync.Config{Namespace: "team-a", StatusFields: gitsync.StatusCommit})
	require.NoError(t, err)
	assert.NotNil(t, c.Source)
}

// The keys Numaplane reads at each use are read when the file changes:
// cascadeDeletion (Controller.Current), automatedSyncDisabled, and the
// program's own keys (OnReload).
func TestControllerFollowsTheLiveKeys(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	write := func(s string) {
		tmp := path + ".tmp"
		require.NoError(t, os.WriteFile(tmp, []byte(s), 0o644))
		require.NoError(t, os.Rename(tmp, path))
	}
	write("clusterName: c1\ncascadeDeletion: false\nlogLevel: 1\n")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	cfg, err := gitsync.ParseControllerConfig(data, "logLevel")
	require.NoError(t, err)
	reloaded := make(chan []byte, 4)
	c, err := gitsync.NewController(gitsync.ControllerFile{Path: path, Config: cfg, OwnKeys: []string{"logLevel"},
		OnReload: func(data []byte) { reloaded <- data }}, nil, nil, gitsync.Config{})
	require.NoError(t, err)
	assert.False(t, c.CascadeDeletion())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()

	// The watch starts with Start: until it has, a change may be taken
	// for the file as it started. Written again (the other way round)
	// until a reload says the new content.
	for i := 0; ; i++ {
		level := 4 + i%2
		write(fmt.Sprintf("clusterName: c1\ncascadeDeletion: true\nautomatedSyncDisabled: true\nlogLevel: %d\n", level))
		select {
		case data := <-reloaded:
			assert.Contains(t, string(data), "logLevel:", "the program reads its own key again")
			assert.True(t, c.CascadeDeletion(), "cascadeDeletion as the file says now")
			assert.True(t, c.Current().AutomatedSyncDisabled)
			assert.False(t, c.Config.CascadeDeletion, "Config stays what it started with")
			return
		case <-time.After(time.Second): // well past the watch's debounce
		}
		require.Less(t, i, 30, "no reload")
	}
}
