package static

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
	"unique"

	"sigs.k8s.io/yaml"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/mirror"
	"github.com/modwatch/modwatch/internal/safefile"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
)

// Source is a fixed set of targets.
type Source struct {
	targets []watcher.Target
}

var _ watcher.Source = (*Source)(nil)

// New returns a source of targets. Its copy of them holds one string per
// distinct URL and revision, however many targets share it.
func New(targets ...watcher.Target) *Source {
	ts := slices.Clone(targets)
	for i := range ts {
		ts[i].URL = unique.Make(ts[i].URL).Value()
		ts[i].Revision = unique.Make(ts[i].Revision).Value()
	}
	return &Source{targets: ts}
}

// Run implements watcher.Source: it gives the set once and waits for ctx.
// The set given is the source's own (never changed after New), so that
// watchers share it rather than hold a copy each.
func (s *Source) Run(ctx context.Context, update func([]watcher.Target)) error {
	update(s.targets)
	<-ctx.Done()
	return nil
}

// File is the YAML form of a target list:
//
//	targets:
//	  - id: podinfo
//	    url: https://github.com/stefanprodan/podinfo
//	    revision: master        # branch, tag, full SHA or semver range; "" = HEAD
//	    path: kustomize         # "" = the whole repository
//	    paths: [base, prod]     # optional: only these, under path
//	    ignore: ["*.md"]        # optional: .gitignore patterns, relative to path
//	    ignoreFile: .sourceignore # optional: ignore files read from the tree
//	    recurseSubmodules: true # optional: submodules in the delivered tree
//	    interval: 5m            # optional
//	    render:                 # optional: the Payload is this payload.Render
//	      renderer: kustomize
//	      namespace: apps
//	    payload: {any: value}   # optional, instead of render: passed to sinks as map[string]any
type File struct {
	Targets []FileTarget `json:"targets"`
}

// FileTarget is one target in a [File].
type FileTarget struct {
	ID         string   `json:"id"`
	URL        string   `json:"url"`
	Revision   string   `json:"revision,omitempty"`
	Path       string   `json:"path,omitempty"`
	Paths      []string `json:"paths,omitempty"`
	Ignore     []string `json:"ignore,omitempty"`
	IgnoreFile string   `json:"ignoreFile,omitempty"`
	// RecurseSubmodules puts the submodules in the delivered tree.
	RecurseSubmodules bool `json:"recurseSubmodules,omitempty"`

	Interval string          `json:"interval,omitempty"`
	Render   *payload.Render `json:"render,omitempty"`
	Payload  map[string]any  `json:"payload,omitempty"`
}

// ErrInvalidFile is returned (wrapped) for a target file that cannot be
// parsed or does not validate.
var ErrInvalidFile = errors.New("static: invalid target file")

// maxFileSize bounds what Parse accepts.
const maxFileSize = 4 << 20

// Load reads and parses a target file. A link is followed (a mounted
// ConfigMap's key is one), to a regular file only: a named pipe, a device
// or a directory is refused without being waited on or read, so is a file
// over 4 MiB (an [ErrInvalidFile] too).
func Load(path string) ([]watcher.Target, error) {
	data, err := safefile.ReadFile(context.Background(), path, maxFileSize, safefile.Follow)
	if errors.Is(err, safefile.ErrTooLarge) {
		return nil, fmt.Errorf("static: %w: %w", ErrInvalidFile, err)
	}
	if err != nil {
		return nil, fmt.Errorf("static: %w", err)
	}
	ts, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ts, nil
}

// Parse parses and validates a target file. Unknown fields are errors, and
// every error names the field ("targets[2].revision: ...").
func Parse(data []byte) ([]watcher.Target, error) {
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalidFile, maxFileSize)
	}
	var f File
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidFile, err)
	}
	var errs []error
	ids := map[string]int{}
	out := make([]watcher.Target, 0, len(f.Targets))
	for i, ft := range f.Targets {
		field := func(name string) string { return fmt.Sprintf("targets[%d].%s", i, name) }
		t := watcher.Target{ID: ft.ID, URL: ft.URL, Revision: ft.Revision, Path: ft.Path, Paths: ft.Paths, Ignore: ft.Ignore, IgnoreFile: ft.IgnoreFile, RecurseSubmodules: ft.RecurseSubmodules}
		switch {
		case ft.Render != nil && ft.Payload != nil:
			errs = append(errs, fmt.Errorf("%s: render and payload are both set", field("payload")))
		case ft.Render != nil:
			if err := ft.Render.Validate(); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", field("render"), err))
			}
			t.Payload = *ft.Render
		case ft.Payload != nil:
			t.Payload = ft.Payload
		}
		if ft.Interval != "" {
			d, err := time.ParseDuration(ft.Interval)
			if err != nil || d <= 0 {
				errs = append(errs, fmt.Errorf("%s: %q is not a positive duration", field("interval"), ft.Interval))
			}
			t.Interval = d
		}
		switch {
		case ft.ID == "":
			errs = append(errs, fmt.Errorf("%s: required", field("id")))
		case ids[ft.ID] > 0:
			errs = append(errs, fmt.Errorf("%s: %q repeats targets[%d].id", field("id"), ft.ID, ids[ft.ID]-1))
		default:
			ids[ft.ID] = i + 1
		}
		if ft.URL == "" {
			errs = append(errs, fmt.Errorf("%s: required", field("url")))
		} else if _, err := gitutil.ParseURL(ft.URL); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", field("url"), err))
		}
		if _, err := gitutil.ParseRevision(ft.Revision); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", field("revision"), err))
		}
		if _, err := mirror.CleanPath(ft.Path); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", field("path"), err))
		} else if err := t.Selection().Validate(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", field("paths/ignore"), err))
		}
		out = append(out, t)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalidFile, errors.Join(errs...))
	}
	return out, nil
}
