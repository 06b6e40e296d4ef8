package configmap

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/mirror"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/credential"
	"github.com/modwatch/modwatch/watcher/payload"
)

// Config is the agent's configuration file, in Numaplane's agent format.
// Every key is read, or refused by name: a key the package does not
// implement is an error, unless the program reads it itself (see
// [LoadOptions.OwnKeys]; Numaplane's logLevel is one).
type Config struct {
	// ClusterName is the cluster the agent runs in: the destination of its
	// definitions that name none, and the entry of the reference files
	// whose values it takes.
	ClusterName string `json:"clusterName,omitempty"`
	// TimeIntervalSec is the poll interval in seconds; 0 leaves the
	// watcher's.
	TimeIntervalSec int          `json:"timeIntervalSec,omitempty"`
	Source          SourceConfig `json:"source"`
}

// SourceConfig names the control repositories and the values of their
// placeholders.
type SourceConfig struct {
	KeyValueGenerator KeyValueGenerator `json:"keyValueGenerator,omitzero"`
	// GitDefinition is the control repository (Numaplane's form);
	// GitDefinitions a handful of them, each with a unique Name. Exactly one
	// of the two is set.
	GitDefinition  *GitDefinition  `json:"gitDefinition,omitempty"`
	GitDefinitions []GitDefinition `json:"gitDefinitions,omitempty"`
}

// KeyValueGenerator gives the values of "{{key}}" placeholders: Embedded
// in the file, or Reference, files in git repositories (Numaplane's
// MultiClusterFileGenerator). At most one is set.
type KeyValueGenerator struct {
	Embedded *struct {
		Values map[string]string `json:"values"`
	} `json:"embedded,omitempty"`
	Reference *Reference `json:"reference,omitempty"`
}

// Reference is a list of files in git repositories, each a JSON (or YAML)
// map of cluster names to the key/value pairs of that cluster: the agent
// takes its own cluster's entry of each, a later file's values overriding
// an earlier's.
type Reference struct {
	Files []FileRef `json:"files"`
}

// FileRef is one file of a [Reference]: Path in the repository at RepoURL,
// at TargetRevision (a branch, tag or commit; "" is the remote's HEAD),
// reached with RepoCredential when it is set.
type FileRef struct {
	RepoURL        string           `json:"repoUrl"`
	TargetRevision string           `json:"targetRevision,omitempty"`
	Path           string           `json:"path"`
	RepoCredential *credential.Repo `json:"repoCredential,omitempty"`
}

// GitDefinition is a repository path to apply: a GitSync's spec, a name,
// and (Numaplane's CredentialedGitSource) the credential of its
// repository.
type GitDefinition struct {
	// Name names the definition in a GitDefinitions list (the target ID is
	// built from it); a lone GitDefinition is named "control".
	Name string `json:"name,omitempty"`
	payload.GitSync
	// RepoCredential reaches the repository; its url, when empty, is the
	// definition's repoUrl. The program resolves it (see
	// [LoadOptions.Credentials]).
	RepoCredential *credential.Repo `json:"repoCredential,omitempty"`
}

// ErrInvalid is returned (wrapped) for a configuration that cannot be
// used; the message names the field, the line or the missing key.
var ErrInvalid = errors.New("configmap: invalid configuration")

// placeholder is "{{key}}", spaces allowed inside the braces.
var placeholder = regexp.MustCompile(`\{\{\s*([A-Za-z0-9_.-]+)\s*\}\}`)

// Values returns the values of a [Reference]'s placeholders for the
// cluster named; see [GitValues].
type Values func(ctx context.Context, ref Reference, cluster string) (map[string]string, error)

// LoadOptions say how a configuration is read.
type LoadOptions struct {
	// Prefix starts the target IDs ("configmap" gives "configmap/control").
	Prefix string
	// OwnKeys are top-level keys the program reads itself (Numaplane's
	// logLevel): accepted, and left to it.
	OwnKeys []string
	// Values reads a keyValueGenerator.reference; without it such a
	// configuration is an error.
	Values Values
	// Credentials is handed the credentials the configuration names, as
	// Loaded.Credentials, before Values reads a reference's files (which
	// may need them); its error is the configuration's. Without it, a
	// configuration that names credentials is an error.
	Credentials func([]credential.Repo) error
}

// Loaded is what a configuration says: its targets, and the credentials
// its definitions and reference files name, for the program to resolve
// (the watcher's credential resolver; Secrets are the program's to read).
type Loaded struct {
	Config      Config
	Targets     []watcher.Target
	Credentials []credential.Repo
}

// Parse reads a configuration (YAML or JSON), fills its placeholders and
// returns its targets, their IDs prefixed with prefix ("configmap/control").
// A reference generator, and a configuration that names credentials, need
// [Load]: Parse refuses them rather than drop what it cannot return.
func Parse(data []byte, prefix string) ([]watcher.Target, error) {
	l, err := Load(context.Background(), data, LoadOptions{Prefix: prefix})
	if err != nil {
		return nil, err
	}
	return l.Targets, nil
}

// topKeys are the top-level keys of the configuration.
var topKeys = []string{"clusterName", "timeIntervalSec", "source"}

// Load reads a configuration strictly (an unknown key at any depth is an
// error naming it), gets its placeholders' values, fills them and returns
// its targets and the credentials it names.
func Load(ctx context.Context, data []byte, opts LoadOptions) (*Loaded, error) {
	var raw map[string]any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := dropOwnKeys(raw, opts.OwnKeys); err != nil {
		return nil, err
	}
	var cfg Config
	if err := decode(raw, &cfg); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	creds, err := cfg.credentials()
	if err != nil {
		return nil, err
	}
	switch {
	case len(creds) > 0 && opts.Credentials == nil:
		return nil, fmt.Errorf("%w: the configuration names repository credentials and the program resolves none (LoadOptions.Credentials)", ErrInvalid)
	case opts.Credentials != nil:
		if err := opts.Credentials(creds); err != nil {
			return nil, fmt.Errorf("configmap: repository credentials: %w", err)
		}
	}
	values, err := cfg.values(ctx, opts.Values)
	if err != nil {
		return nil, err
	}
	// Placeholders are filled in the parsed definitions, string by string,
	// so that a value cannot change the document's structure.
	src, _ := raw["source"].(map[string]any)
	for _, key := range []string{"gitDefinition", "gitDefinitions"} {
		if v, ok := src[key]; ok {
			filled, err := fill(v, values, "source."+key)
			if err != nil {
				return nil, err
			}
			src[key] = filled
		}
	}
	if err := decode(raw, &cfg); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	targets, err := cfg.Targets(opts.Prefix)
	if err != nil {
		return nil, err
	}
	return &Loaded{Config: cfg, Targets: targets, Credentials: creds}, nil
}

// dropOwnKeys removes the program's own top-level keys from raw; any other
// key that is not the configuration's is an error naming it.
func dropOwnKeys(raw map[string]any, own []string) error {
	var unknown []string
	for k := range raw {
		switch {
		case slices.Contains(own, k):
			delete(raw, k)
		case !slices.Contains(topKeys, k):
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return fmt.Errorf("%w: unknown keys: %s (the program reads its own keys itself: configmap.LoadOptions.OwnKeys)", ErrInvalid, strings.Join(unknown, ", "))
	}
	return nil
}

// values returns the placeholders' values the key/value generator gives.
func (c Config) values(ctx context.Context, read Values) (map[string]string, error) {
	kv := c.Source.KeyValueGenerator
	switch {
	case kv.Embedded != nil && kv.Reference != nil:
		return nil, fmt.Errorf("%w: source.keyValueGenerator: embedded and reference are both set", ErrInvalid)
	case kv.Embedded != nil:
		return kv.Embedded.Values, nil
	case kv.Reference == nil:
		return nil, nil
	}
	if err := kv.Reference.validate(); err != nil {
		return nil, err
	}
	if read == nil {
		return nil, fmt.Errorf("%w: source.keyValueGenerator.reference: the program gives no way to read its files (LoadOptions.Values, configmap.GitValues)", ErrInvalid)
	}
	values, err := read(ctx, *kv.Reference, c.ClusterName)
	if err != nil {
		return nil, fmt.Errorf("configmap: source.keyValueGenerator.reference: %w", err)
	}
	return values, nil
}

func (r Reference) validate() error {
	if len(r.Files) == 0 {
		return fmt.Errorf("%w: source.keyValueGenerator.reference: no files", ErrInvalid)
	}
	for i, f := range r.Files {
		at := fmt.Sprintf("source.keyValueGenerator.reference.files[%d]", i)
		if _, err := gitutil.ParseURL(f.RepoURL); err != nil {
			return fmt.Errorf("%w: %s.repoUrl: %w", ErrInvalid, at, err)
		}
		if _, err := gitutil.ParseRevision(f.TargetRevision); err != nil {
			return fmt.Errorf("%w: %s.targetRevision: %w", ErrInvalid, at, err)
		}
		if p, err := mirror.CleanPath(f.Path); err != nil || p == "" {
			return fmt.Errorf("%w: %s.path %q is not a file of the repository", ErrInvalid, at, f.Path)
		}
	}
	return nil
}

// credentials returns the credentials the definitions and reference files
// name, each url defaulted to its repository's and checked.
func (c Config) credentials() ([]credential.Repo, error) {
	var out []credential.Repo
	add := func(rc *credential.Repo, repoURL, at string) error {
		if rc == nil {
			return nil
		}
		r := *rc
		if r.URL == "" {
			r.URL = repoURL
		}
		if err := r.Validate(at + ".repoCredential"); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		out = append(out, r)
		return nil
	}
	if d := c.Source.GitDefinition; d != nil {
		if err := add(d.RepoCredential, d.RepoURL, "source.gitDefinition"); err != nil {
			return nil, err
		}
	}
	for i, d := range c.Source.GitDefinitions {
		if err := add(d.RepoCredential, d.RepoURL, fmt.Sprintf("source.gitDefinitions[%d]", i)); err != nil {
			return nil, err
		}
	}
	if r := c.Source.KeyValueGenerator.Reference; r != nil {
		for i, f := range r.Files {
			if err := add(f.RepoCredential, f.RepoURL, fmt.Sprintf("source.keyValueGenerator.reference.files[%d]", i)); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

func decode(raw map[string]any, cfg *Config) error {
	data, err := json.Marshal(raw)
	if err != nil {
		return err
	}
	*cfg = Config{}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(cfg)
}

// fill replaces the placeholders in every string of v.
func fill(v any, values map[string]string, at string) (any, error) {
	switch v := v.(type) {
	case string:
		var missing string
		out := placeholder.ReplaceAllStringFunc(v, func(m string) string {
			key := placeholder.FindStringSubmatch(m)[1]
			val, ok := values[key]
			if !ok && missing == "" {
				missing = key
			}
			return val
		})
		if missing != "" {
			return nil, fmt.Errorf("%w: %s: no value for placeholder {{%s}}", ErrInvalid, at, missing)
		}
		if strings.Contains(placeholder.ReplaceAllString(v, ""), "{{") {
			return nil, fmt.Errorf("%w: %s: malformed placeholder in %q", ErrInvalid, at, v)
		}
		return out, nil
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			f, err := fill(v[k], values, at+"."+k)
			if err != nil {
				return nil, err
			}
			v[k] = f
		}
		return v, nil
	case []any:
		for i := range v {
			f, err := fill(v[i], values, fmt.Sprintf("%s[%d]", at, i))
			if err != nil {
				return nil, err
			}
			v[i] = f
		}
		return v, nil
	default:
		return v, nil
	}
}

// Targets validates c and returns its targets.
func (c Config) Targets(prefix string) ([]watcher.Target, error) {
	if c.TimeIntervalSec < 0 {
		return nil, fmt.Errorf("%w: timeIntervalSec is negative", ErrInvalid)
	}
	defs := c.Source.GitDefinitions
	switch {
	case c.Source.GitDefinition != nil && len(defs) > 0:
		return nil, fmt.Errorf("%w: source: gitDefinition and gitDefinitions are both set", ErrInvalid)
	case c.Source.GitDefinition != nil:
		d := *c.Source.GitDefinition
		if d.Name == "" {
			d.Name = "control"
		}
		defs = []GitDefinition{d}
	case defs == nil:
		return nil, fmt.Errorf("%w: source: no gitDefinition", ErrInvalid)
	case len(defs) == 0:
		// "gitDefinitions: []" says, explicitly, watch nothing.
		return []watcher.Target{}, nil
	}
	seen := map[string]bool{}
	var out []watcher.Target
	for i, d := range defs {
		at := fmt.Sprintf("source.gitDefinitions[%d]", i)
		if c.Source.GitDefinition != nil {
			at = "source.gitDefinition"
		}
		t, err := d.target(prefix, c)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, at, err)
		}
		if seen[t.ID] {
			return nil, fmt.Errorf("%w: %s: name %q is used twice", ErrInvalid, at, d.Name)
		}
		seen[t.ID] = true
		out = append(out, t)
	}
	return out, nil
}

var validName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)

func (d GitDefinition) target(prefix string, c Config) (watcher.Target, error) {
	if !validName.MatchString(d.Name) {
		return watcher.Target{}, fmt.Errorf("name %q is not a DNS-1123 name", d.Name)
	}
	if d.Destination.Cluster == "" {
		d.Destination.Cluster = c.ClusterName
	}
	return d.GitSync.Target(strings.TrimSuffix(prefix, "/")+"/"+d.Name, time.Duration(c.TimeIntervalSec)*time.Second)
}
