package gitsync

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
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
	"github.com/modwatch/modwatch/watcher/credential"
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
	// LogLevel is Numaplane's log verbosity (0 info, each step one more
	// logr V level), the program's to act on: the library logs through the
	// logger the program gives it. Nil when the file does not say.
	LogLevel *int `json:"logLevel,omitempty"`
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

// The credential types are watcher/credential's, Numaplane's JSON form,
// shared with the agent's configuration (source/configmap).
type (
	RepoCredential = credential.Repo
	HTTPCredential = credential.HTTP
	SSHCredential  = credential.SSH
	TLS            = credential.TLS
	SecretSource   = credential.SecretSource
	SecretKeyRef   = credential.SecretKeyRef
	FileKeyRef     = credential.FileKeyRef
)

// ErrInvalidConfig is returned (wrapped) for a controller configuration
// that cannot be used.
var ErrInvalidConfig = errors.New("gitsync: invalid controller configuration")

// knownKeys are the controller configuration's keys this package reads.
var knownKeys = []string{"clusterName", "syncTimeIntervalMs", "persistentRepoClonePath", "cascadeDeletion",
	"autoHealDisabled", "automatedSyncDisabled", "includedResources", "repoCredentials", "logLevel"}

// ParseControllerConfig reads a controller configuration (YAML or JSON)
// and checks it, strictly: a key that is not Numaplane's is an error that
// names it, unless it is one of ownKeys, the keys the program adds and
// reads itself. Nothing is silently ignored, in the file or in any object
// of it.
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
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, fmt.Errorf("%w: unknown keys (not Numaplane's, nor the program's own): %s", ErrInvalidConfig, strings.Join(unknown, ", "))
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
	if c.LogLevel != nil && *c.LogLevel < 0 {
		return fmt.Errorf("%w: logLevel %d is negative", ErrInvalidConfig, *c.LogLevel)
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

// Controller is Numaplane's controller configuration as a program runs it:
// the configuration it started with, the credentials it names, and the
// source of GitSyncs, kept in step with each change of the configuration
// (the file followed while Start runs, or the program's own [Controller.Reload]).
type Controller struct {
	// Config is the configuration read at the start.
	Config *ControllerConfig
	// Source is the GitSyncs for this cluster; Credentials the
	// configuration's repository credentials, from its Secrets and files.
	Source      *Source
	Credentials *Credentials
	opts        ControllerOptions
	current     atomic.Pointer[liveConfig]
	reloadMu    sync.Mutex // one Reload at a time: the credentials, settings and current change together
}

// ControllerOptions says where a [Controller]'s configuration comes from
// and what the program adds to it.
type ControllerOptions struct {
	// Path is the configuration file (a mounted ConfigMap, reached through
	// links): read by NewController and followed while Start runs. A named
	// pipe, a device, a directory or a file over 4 MiB is refused without
	// being waited on or read.
	Path string
	// Config is a configuration the program read and follows itself (with
	// its own configuration manager): set instead of Path, it hands each
	// change to [Controller.Reload], and no file is followed.
	Config *ControllerConfig
	// OwnKeys are keys of the file at Path that the program reads itself,
	// beside Numaplane's (see [ParseControllerConfig]).
	OwnKeys []string
	// OnReload, when set, is called with each configuration taken, the
	// first (by NewController) and every change (of the file, or by
	// Reload), with the file's content (nil when the program handed the
	// configuration): the program reads the keys it acts on, logLevel for
	// one, in one place.
	OnReload func(cfg *ControllerConfig, data []byte)
	// ResyncEvery is how many poll intervals pass between two resyncs,
	// the deliveries that correct drift (none while autoHealDisabled):
	// 1 resyncs at every interval, as Numaplane's own syncer does. 0: ten
	// intervals, and at least ten minutes. Negative is refused.
	ResyncEvery int
	// Source configures the source of GitSyncs; its Settings and
	// Credentials are the configuration's, and must be left unset.
	Source Config
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

// Current is the configuration as it is now (Config until it changes):
// for the keys a program reads at each use, such as cascadeDeletion (see
// apply.Config.CascadeDeleteFunc).
func (c *Controller) Current() *ControllerConfig { return c.current.Load().cfg }

// Instance names the install among others that share an inventory
// namespace (apply.Config.Instance), when the program has no name of its
// own for it: "namespace/<ns>" for a Controller of the GitSyncs of one
// namespace; "" for one of all namespaces (the inventories of an install
// from before instances existed).
func (c *Controller) Instance() string {
	if ns := c.opts.Source.Namespace; ns != "" {
		return "namespace/" + ns
	}
	return ""
}

// CascadeDeletion is Current's cascadeDeletion.
func (c *Controller) CascadeDeletion() bool { return c.Current().CascadeDeletion }

// Included reports whether Current's includedResources include gk (for
// apply.Config.Include).
func (c *Controller) Included(gk schema.GroupKind) bool {
	return c.current.Load().kinds.Includes(gk)
}

// NewController makes the Controller of the configuration o names (its
// Path or its Config), reading Secrets through kube (nil when none is
// named) and GitSyncs through dyn.
func NewController(kube kubernetes.Interface, dyn dynamic.Interface, o ControllerOptions) (*Controller, error) {
	switch {
	case (o.Path == "") == (o.Config == nil):
		return nil, fmt.Errorf("%w: set one of ControllerOptions.Path and ControllerOptions.Config", ErrInvalidConfig)
	case o.Source.Settings != (Settings{}) || o.Source.Credentials != nil:
		return nil, fmt.Errorf("%w: the source's Settings and Credentials are the controller configuration's; leave them unset", ErrInvalidConfig)
	case o.ResyncEvery < 0:
		return nil, fmt.Errorf("%w: ResyncEvery %d is negative", ErrInvalidConfig, o.ResyncEvery)
	}
	cfg, data := o.Config, []byte(nil)
	if o.Path != "" {
		var err error
		if data, err = safefile.ReadFile(context.Background(), o.Path, filewatch.MaxSize, safefile.Follow); err != nil {
			return nil, err
		}
		if cfg, err = ParseControllerConfig(data, o.OwnKeys...); err != nil {
			return nil, fmt.Errorf("%s: %w", o.Path, err)
		}
	} else if err := cfg.Validate(); err != nil {
		return nil, err
	}
	creds, err := NewCredentials(kube, cfg)
	if err != nil {
		return nil, err
	}
	o.Source.Settings, o.Source.Credentials = cfg.settings(), creds
	c := &Controller{Config: cfg, Source: New(dyn, o.Source), Credentials: creds, opts: o}
	c.setCurrent(cfg)
	if o.OnReload != nil {
		o.OnReload(cfg, data)
	}
	return c, nil
}

// Reload takes cfg as the configuration now: the credentials, the cluster
// name, the interval and automatedSyncDisabled change at once (the
// namespace watched stays); cascadeDeletion and autoHealDisabled are read
// at each use. An invalid cfg is refused and the configuration stays.
func (c *Controller) Reload(cfg *ControllerConfig) error { return c.reload(cfg, nil) }

func (c *Controller) reload(cfg *ControllerConfig, data []byte) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	c.reloadMu.Lock()
	if err := c.Credentials.Set(cfg); err != nil {
		c.reloadMu.Unlock()
		return err
	}
	c.Source.SetSettings(cfg.settings())
	c.setCurrent(cfg)
	c.reloadMu.Unlock()
	if c.opts.OnReload != nil { // the program's code, with no lock held
		c.opts.OnReload(cfg, data)
	}
	return nil
}

// settings are the source's Settings the configuration says.
func (c *ControllerConfig) settings() Settings {
	return Settings{ClusterName: c.ClusterName, Interval: c.Interval(), Suspend: c.AutomatedSyncDisabled}
}

// WatcherOptions are what the configuration says of the watcher: the
// repository mirrors under persistentRepoClonePath (or cacheDir), the
// checkpoints in store (nil: files beside the mirrors), the credentials,
// the source's status writer, and the resync that corrects drift
// (ControllerOptions.ResyncEvery), unless autoHealDisabled, both as the
// configuration says at each resync. They set the watcher's cache
// directory, store, credentials and resync: a program adds none of those
// (the watcher refuses a second).
func (c *Controller) WatcherOptions(cacheDir string, store watcher.Store) ([]watcher.Option, error) {
	root := cmp.Or(c.Config.PersistentRepoClonePath, cacheDir)
	if store == nil {
		files, err := watcher.NewFileStore(filepath.Join(root, "checkpoints"))
		if err != nil {
			return nil, err
		}
		store = files
	}
	return []watcher.Option{watcher.WithCacheDir(filepath.Join(root, "mirrors")), watcher.WithStore(store),
		watcher.WithCredentials(c.Credentials), watcher.WithObserver(c.Source.Observer()), watcher.WithResync(c.ResyncInterval)}, nil
}

// ResyncInterval is the time to the next resync as the configuration says
// now (0: none): what WatcherOptions has the watcher ask at each resync.
func (c *Controller) ResyncInterval() time.Duration {
	cur := c.Current()
	interval := cur.Interval()
	switch {
	case cur.AutoHealDisabled:
		return 0
	case c.opts.ResyncEvery == 0:
		return 10 * max(interval, time.Minute)
	case interval == 0:
		interval = time.Minute // the watcher's default interval
	}
	return time.Duration(c.opts.ResyncEvery) * interval
}

// Start follows the configuration file (ControllerOptions.Path) until ctx
// is done: a changed file is taken as [Controller.Reload] takes it, a
// changed persistentRepoClonePath is logged as taking effect at the next
// start, and a file that cannot be read or parsed leaves the last good
// configuration in place and is logged, to the logger of ctx. Without a
// Path it waits for ctx. It is a controller-runtime Runnable for every
// replica.
func (c *Controller) Start(ctx context.Context) error {
	if c.opts.Path == "" {
		<-ctx.Done()
		return nil
	}
	log := logr.FromContextOrDiscard(ctx)
	first := true
	return filewatch.Watch(ctx, c.opts.Path, 100*time.Millisecond, log, func(data []byte, err error) {
		var cfg *ControllerConfig
		if err == nil {
			cfg, err = ParseControllerConfig(data, c.opts.OwnKeys...)
		}
		if first { // the file as NewController read it, or as it is now
			first = false
			if err != nil || reflect.DeepEqual(cfg, c.Config) {
				return
			}
		}
		if err == nil {
			err = c.reload(cfg, data)
		}
		if err != nil {
			log.Error(fmt.Errorf("%s: %w", c.opts.Path, err), "configuration not reloaded; the last good one stays")
			return
		}
		log.Info("configuration reloaded", "path", c.opts.Path)
		if cfg.PersistentRepoClonePath != c.Config.PersistentRepoClonePath {
			log.Info("persistentRepoClonePath takes effect at the next start")
		}
	})
}

// NeedLeaderElection is false: every replica's source follows the file.
func (c *Controller) NeedLeaderElection() bool { return false }
