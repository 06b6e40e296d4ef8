package gitsync

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/filewatch"
	"github.com/modwatch/modwatch/internal/safefile"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/spec"
)

// ControllerConfig is Numaplane's controller configuration file: the keys
// this package implements. A key it does not is an error, unless the
// program says it reads that key itself (see [ParseControllerConfig]).
type ControllerConfig struct {
	ClusterName string `json:"clusterName,omitempty"`
	// SyncTimeIntervalMs is the poll interval.
	SyncTimeIntervalMs int64 `json:"syncTimeIntervalMs,omitempty"`
	// PersistentRepoClonePath is the mirror cache directory.
	PersistentRepoClonePath string `json:"persistentRepoClonePath,omitempty"`
	// CascadeDeletion deletes a GitSync's objects with it.
	CascadeDeletion bool `json:"cascadeDeletion,omitempty"`
	// AutoHealDisabled turns off the periodic resync that corrects drift.
	AutoHealDisabled bool `json:"autoHealDisabled,omitempty"`
	// AutomatedSyncDisabled suspends every GitSync: polled, its failures
	// shown, nothing applied, until it is false again.
	AutomatedSyncDisabled bool `json:"automatedSyncDisabled,omitempty"`
	// IncludedResources are the kinds GitSyncs may apply, in Numaplane's
	// form: "group=apps,kind=Deployment;group=,kind=ConfigMap;group=x.io,kind="
	// (an empty kind: every kind of the group); "" includes every kind. See
	// [Controller.Included].
	IncludedResources string           `json:"includedResources,omitempty"`
	RepoCredentials   []RepoCredential `json:"repoCredentials,omitempty"`
}

// GroupKinds are kinds by API group: an entry with an empty Kind is every
// kind of its group.
type GroupKinds []schema.GroupKind

// Includes reports whether gk is one of them; an empty list includes
// every kind.
func (l GroupKinds) Includes(gk schema.GroupKind) bool {
	if len(l) == 0 {
		return true
	}
	for _, r := range l {
		if r.Group == gk.Group && (r.Kind == "" || r.Kind == gk.Kind) {
			return true
		}
	}
	return false
}

// ParseIncludedResources reads Numaplane's includedResources: rules
// separated by ";", each "group=G,kind=K" (both keys, in any order and
// case; spaces around them and an empty rule are ignored, where Numaplane
// is stricter). Anything else is an error naming the rule. One difference
// from Numaplane: "" includes every kind (Numaplane's cache then watches
// none).
func ParseIncludedResources(s string) (GroupKinds, error) {
	var out GroupKinds
	for i, rule := range strings.Split(s, ";") {
		rule = strings.TrimSpace(rule)
		if rule == "" {
			continue
		}
		var gk schema.GroupKind
		seen := map[string]bool{}
		for _, kv := range strings.Split(rule, ",") {
			k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
			k = strings.ToLower(k) // as Numaplane compares them
			if !ok || (k != "group" && k != "kind") || seen[k] {
				return nil, fmt.Errorf("%w: includedResources rule %d %q: not group=G,kind=K", ErrInvalidConfig, i+1, rule)
			}
			seen[k] = true
			if k == "group" {
				gk.Group = strings.TrimSpace(v)
			} else {
				gk.Kind = strings.TrimSpace(v)
			}
		}
		if !seen["group"] || !seen["kind"] {
			return nil, fmt.Errorf("%w: includedResources rule %d %q: needs both group= and kind=", ErrInvalidConfig, i+1, rule)
		}
		out = append(out, gk)
	}
	return out, nil
}

// The credential types are watcher/spec's, Numaplane's JSON form, shared
// with the agent's configuration (source/configmap).
type (
	RepoCredential = spec.RepoCredential
	HTTPCredential = spec.HTTPCredential
	SSHCredential  = spec.SSHCredential
	TLS            = spec.TLS
	SecretSource   = spec.SecretSource
	SecretKeyRef   = spec.SecretKeyRef
	FileKeyRef     = spec.FileKeyRef
)

// ErrInvalidConfig is returned (wrapped) for a controller configuration
// that cannot be used.
var ErrInvalidConfig = errors.New("gitsync: invalid controller configuration")

// knownKeys are the controller configuration's keys this package reads.
var knownKeys = []string{"clusterName", "syncTimeIntervalMs", "persistentRepoClonePath", "cascadeDeletion",
	"autoHealDisabled", "automatedSyncDisabled", "includedResources", "repoCredentials"}

// programKeys are keys of Numaplane's configuration that belong to the
// program, not to this package: they are errors unless the program names
// them as its own.
var programKeys = map[string]string{
	"logLevel": "the program's log verbosity",
}

// ParseControllerConfig reads a controller configuration (YAML or JSON)
// and checks it, strictly: a key this package does not implement is an
// error that names it, unless it is one of ownKeys, the keys the program
// reads itself (Numaplane's logLevel, for one). Nothing is silently
// ignored, in the file or in any object of it.
func ParseControllerConfig(data []byte, ownKeys ...string) (*ControllerConfig, error) {
	var raw map[string]any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	var unknown []string
	for k := range raw {
		if slices.Contains(ownKeys, k) {
			delete(raw, k)
			continue
		}
		if !slices.Contains(knownKeys, k) {
			what := "not a key of this package"
			if p, ok := programKeys[k]; ok {
				what = p + ", which this package does not implement: the program reads it (and names it as its own) or the key goes"
			}
			unknown = append(unknown, fmt.Sprintf("%s (%s)", k, what))
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, fmt.Errorf("%w: unknown keys: %s", ErrInvalidConfig, strings.Join(unknown, "; "))
	}
	known, err := yaml.Marshal(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	cfg := &ControllerConfig{}
	if err := yaml.UnmarshalStrict(known, cfg); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// Validate checks the configuration and says which field is wrong.
func (c *ControllerConfig) Validate() error {
	if c.SyncTimeIntervalMs < 0 {
		return fmt.Errorf("%w: syncTimeIntervalMs is negative", ErrInvalidConfig)
	}
	if _, err := ParseIncludedResources(c.IncludedResources); err != nil {
		return err
	}
	var prefixes []string
	for i, rc := range c.RepoCredentials {
		prefixes = append(prefixes, rc.URL)
		if err := rc.Validate(fmt.Sprintf("repoCredentials[%d]", i)); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
	}
	if _, err := gitutil.NewURLPrefixes(prefixes); err != nil {
		return fmt.Errorf("%w: repoCredentials: %w", ErrInvalidConfig, err)
	}
	return nil
}

// Interval is the poll interval.
func (c *ControllerConfig) Interval() time.Duration {
	return time.Duration(c.SyncTimeIntervalMs) * time.Millisecond
}

// FollowConfig keeps src and creds in step with the controller
// configuration file at path until ctx is done: a changed file changes the
// credentials, the cluster name, the interval and automatedSyncDisabled at
// once (the namespace watched stays); a changed persistentRepoClonePath is
// logged as taking effect at the next start. cascadeDeletion (at each
// removal) and autoHealDisabled (at each resync) are read through
// [Controller.Current]. A file
// that cannot be read or parsed leaves the last good configuration in
// place and is logged.
// It logs to the logger of ctx.
func FollowConfig(ctx context.Context, path string, src *Source, creds *Credentials) error {
	return followConfig(ctx, path, src, creds, nil, nil)
}

func followConfig(ctx context.Context, path string, src *Source, creds *Credentials, ownKeys []string, reloaded func(*ControllerConfig, []byte)) error {
	log := logr.FromContextOrDiscard(ctx)
	var started *ControllerConfig // what the caller started with
	first := true
	return filewatch.Watch(ctx, path, 100*time.Millisecond, log, func(data []byte, err error) {
		var cfg *ControllerConfig
		if err == nil {
			cfg, err = ParseControllerConfig(data, ownKeys...)
		}
		if first {
			first, started = false, cfg
			return
		}
		if err == nil {
			err = creds.Set(cfg)
		}
		if err != nil {
			log.Error(fmt.Errorf("%s: %w", path, err), "configuration not reloaded; the last good one stays")
			return
		}
		src.SetSettings(cfg.settings())
		if reloaded != nil {
			reloaded(cfg, data)
		}
		log.Info("configuration reloaded", "path", path)
		if started != nil && cfg.PersistentRepoClonePath != started.PersistentRepoClonePath {
			log.Info("persistentRepoClonePath takes effect at the next start")
		}
	})
}

// Controller is Numaplane's controller configuration as a program runs it:
// the configuration it started with, the credentials it names, and the
// source of GitSyncs, kept in step with the file while Start runs.
type Controller struct {
	// Config is the configuration read at the start.
	Config *ControllerConfig
	// Source is the GitSyncs for this cluster; Credentials the
	// configuration's repository credentials, from its Secrets and files.
	Source      *Source
	Credentials *Credentials
	path        string
	ownKeys     []string
	onReload    func([]byte)
	current     atomic.Pointer[liveConfig]
}

// liveConfig is the configuration as the file says now, with its
// includedResources parsed once.
type liveConfig struct {
	cfg   *ControllerConfig
	kinds GroupKinds
}

// setCurrent records cfg as the configuration now; it was validated, so
// its includedResources parse.
func (c *Controller) setCurrent(cfg *ControllerConfig) {
	kinds, _ := ParseIncludedResources(cfg.IncludedResources)
	c.current.Store(&liveConfig{cfg: cfg, kinds: kinds})
}

// Current is the configuration as the file says now (Config until it
// changes): for the keys a program reads at each use, such as
// cascadeDeletion (see apply.Config.CascadeDeleteFunc).
func (c *Controller) Current() *ControllerConfig { return c.current.Load().cfg }

// CascadeDeletion is Current's cascadeDeletion.
func (c *Controller) CascadeDeletion() bool { return c.Current().CascadeDeletion }

// Included reports whether Current's includedResources include gk (for
// apply.Config.Include).
func (c *Controller) Included(gk schema.GroupKind) bool {
	return c.current.Load().kinds.Includes(gk)
}

// LoadController reads the controller configuration at path and makes its
// credentials and the source of the GitSyncs cfg says (its Settings and
// Credentials are the file's, and must be left unset). Every key of the
// file must be one this package implements (see [NewController] for a
// program that reads some keys itself). The file may be reached through
// links (a mounted ConfigMap); a named pipe, a device, a directory or a
// file over 4 MiB is refused without being waited on or read.
func LoadController(path string, kube kubernetes.Interface, dyn dynamic.Interface, cfg Config) (*Controller, error) {
	// As Start follows it: through links (a mounted ConfigMap), to a
	// regular file of at most filewatch.MaxSize.
	data, err := safefile.ReadFile(context.Background(), path, filewatch.MaxSize, safefile.Follow)
	if err != nil {
		return nil, err
	}
	file, err := ParseControllerConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return NewController(ControllerFile{Path: path, Config: file}, kube, dyn, cfg)
}

// ControllerFile is a controller configuration the program read itself:
// the file it came from (followed while [Controller.Start] runs), what
// [ParseControllerConfig] made of it, and the keys the program reads
// itself (passed to it again at each change).
type ControllerFile struct {
	Path    string
	Config  *ControllerConfig
	OwnKeys []string
	// OnReload, when set, is called with the file's content each time a
	// change of it was parsed and taken: the program reads its own keys
	// from it again.
	OnReload func(data []byte)
}

// NewController is LoadController for a configuration the program parsed.
func NewController(file ControllerFile, kube kubernetes.Interface, dyn dynamic.Interface, cfg Config) (*Controller, error) {
	if cfg.Settings != (Settings{}) || cfg.Credentials != nil {
		return nil, fmt.Errorf("%w: the Config's Settings and Credentials are the controller configuration's; leave them unset", ErrInvalidConfig)
	}
	creds, err := NewCredentials(kube, file.Config)
	if err != nil {
		return nil, err
	}
	cfg.Settings, cfg.Credentials = file.Config.settings(), creds
	c := &Controller{Config: file.Config, Source: New(dyn, cfg), Credentials: creds, path: file.Path, ownKeys: file.OwnKeys, onReload: file.OnReload}
	c.setCurrent(file.Config)
	return c, nil
}

// settings are the source's Settings the configuration says.
func (c *ControllerConfig) settings() Settings {
	return Settings{ClusterName: c.ClusterName, Interval: c.Interval(), Suspend: c.AutomatedSyncDisabled}
}

// WatcherOptions are what the configuration says of the watcher: the
// repository mirrors and the checkpoints under persistentRepoClonePath (or
// cacheDir), the credentials, the source's status writer, and a resync
// every ten intervals (at least ten minutes) that corrects drift, unless
// autoHealDisabled — both as the file says at each resync.
func (c *Controller) WatcherOptions(cacheDir string) ([]watcher.Option, error) {
	root := cmp.Or(c.Config.PersistentRepoClonePath, cacheDir)
	store, err := watcher.NewFileStore(filepath.Join(root, "checkpoints"))
	if err != nil {
		return nil, err
	}
	// autoHealDisabled and syncTimeIntervalMs are read at each resync, as
	// the file says then.
	resync := func() time.Duration {
		cur := c.Current()
		if cur.AutoHealDisabled {
			return 0
		}
		return 10 * max(cur.Interval(), time.Minute)
	}
	return []watcher.Option{watcher.WithCacheDir(filepath.Join(root, "mirrors")), watcher.WithStore(store),
		watcher.WithCredentials(c.Credentials), watcher.WithObserver(c.Source.Observer()), watcher.WithResyncFunc(resync)}, nil
}

// Start follows the configuration file until ctx is done (see
// [FollowConfig]). It is a controller-runtime Runnable for every replica.
func (c *Controller) Start(ctx context.Context) error {
	return followConfig(ctx, c.path, c.Source, c.Credentials, c.ownKeys, func(cfg *ControllerConfig, data []byte) {
		c.setCurrent(cfg)
		if c.onReload != nil {
			c.onReload(data)
		}
	})
}

// NeedLeaderElection is false: every replica's source follows the file.
func (c *Controller) NeedLeaderElection() bool { return false }
