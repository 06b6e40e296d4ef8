package helm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/ignore"
	"helm.sh/helm/v3/pkg/releaseutil"
	"helm.sh/helm/v3/pkg/strvals"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/modwatch/modwatch/sink/apply"
	"github.com/modwatch/modwatch/watcher/payload"
)

// Name is the value of payload.Render.Renderer that selects this renderer.
const Name = payload.RendererHelm

// MaxChartSize caps the bytes of the chart read.
const MaxChartSize = 64 << 20

// CRDPolicy says what is done with the CustomResourceDefinitions of a
// chart's crds/ folder, as Flux's HelmRelease install.crds does.
type CRDPolicy string

const (
	// CRDsCreateReplace applies them and keeps them up to date with the
	// chart. The default.
	CRDsCreateReplace CRDPolicy = "CreateReplace"
	// CRDsCreate creates them when absent and never changes them after
	// (Helm's own behaviour): each carries [apply.AnnotationCreateOnly].
	CRDsCreate CRDPolicy = "Create"
	// CRDsSkip leaves them out.
	CRDsSkip CRDPolicy = "Skip"
)

// Renderer is the Helm renderer.
type Renderer struct {
	crds CRDPolicy
}

var _ apply.RepoRenderer = Renderer{}

// Option configures a Renderer.
type Option func(*Renderer)

// WithCRDs sets the policy for the chart's crds/ folder (default
// [CRDsCreateReplace]).
func WithCRDs(p CRDPolicy) Option { return func(r *Renderer) { r.crds = p } }

// New returns the renderer. An unknown CRD policy is refused at the first
// render, naming it.
func New(opts ...Option) Renderer {
	r := Renderer{crds: CRDsCreateReplace}
	for _, o := range opts {
		o(&r)
	}
	return r
}

// Render templates the chart at fsys's root; its dependencies must be
// vendored in charts/ (see RenderRepo for file:// ones).
func (r Renderer) Render(ctx context.Context, fsys fs.FS, rs payload.Render) ([]*unstructured.Unstructured, error) {
	objs, _, err := r.render(ctx, fsys, ".", rs, false)
	return objs, err
}

// RenderRepo templates the chart at dir of the repository root: its
// dependencies are those vendored in charts/, and those Chart.yaml names
// with a file:// repository inside the repository (read, and reported as
// read). A dependency that needs a chart repository is an error: nothing
// is downloaded.
func (r Renderer) RenderRepo(ctx context.Context, root fs.FS, dir string, rs payload.Render) ([]*unstructured.Unstructured, []string, error) {
	return r.render(ctx, root, dir, rs, true)
}

func (r Renderer) render(ctx context.Context, root fs.FS, dir string, rs payload.Render, repoWide bool) ([]*unstructured.Unstructured, []string, error) {
	switch r.crds {
	case CRDsCreateReplace, CRDsCreate, CRDsSkip:
	default:
		return nil, nil, fmt.Errorf("helm: CRD policy %q is not %s, %s or %s", r.crds, CRDsCreateReplace, CRDsCreate, CRDsSkip)
	}
	dir = path.Clean(dir)
	fsys, err := fs.Sub(root, dir)
	if err != nil {
		return nil, nil, err
	}
	l := &chartLoader{root: root, repoWide: repoWide, size: MaxChartSize, seen: map[string]bool{dir: true}}
	chrt, err := l.load(ctx, dir, 0)
	if err != nil {
		return nil, nil, err
	}
	h := payload.Helm{}
	if rs.Helm != nil {
		h = *rs.Helm
	}
	vals, err := values(fsys, h)
	if err != nil {
		return nil, nil, err
	}
	if err := chartutil.ProcessDependenciesWithMerge(chrt, vals); err != nil {
		return nil, nil, fmt.Errorf("helm: dependencies: %w", err)
	}
	manifests, err := template(chrt, vals, chartutil.ReleaseOptions{Name: h.ReleaseName, Namespace: rs.Namespace, Revision: 1, IsInstall: true})
	if err != nil {
		return nil, nil, err
	}
	out, err := r.crdObjects(chrt)
	if err != nil {
		return nil, nil, err
	}
	for _, m := range manifests {
		objs, err := apply.Decode(m.Name, []byte(m.Content))
		if err != nil {
			return nil, nil, err
		}
		out = append(out, objs...)
	}
	return out, l.reads, nil
}

// template renders the chart's templates, as `helm template` does: no
// notes, no hooks, in install order.
func template(chrt *chart.Chart, vals map[string]any, opts chartutil.ReleaseOptions) ([]releaseutil.Manifest, error) {
	caps := chartutil.DefaultCapabilities.Copy()
	top, err := chartutil.ToRenderValues(chrt, vals, opts, caps)
	if err != nil {
		return nil, fmt.Errorf("helm: values: %w", err)
	}
	rendered, err := engine.Render(chrt, top)
	if err != nil {
		return nil, fmt.Errorf("helm: %w", err)
	}
	for name := range rendered {
		if strings.HasSuffix(name, "NOTES.txt") {
			delete(rendered, name)
		}
	}
	_, manifests, err := releaseutil.SortManifests(rendered, caps.APIVersions, releaseutil.InstallOrder)
	if err != nil {
		return nil, fmt.Errorf("helm: %w", err)
	}
	return manifests, nil
}

// crdObjects returns the CRDs of the chart's crds/ folder as the policy
// says: none (Skip), marked create-only (Create), or as they are.
func (r Renderer) crdObjects(chrt *chart.Chart) ([]*unstructured.Unstructured, error) {
	if r.crds == CRDsSkip {
		return nil, nil
	}
	var out []*unstructured.Unstructured
	for _, crd := range chrt.CRDObjects() {
		objs, err := apply.Decode(crd.Filename, crd.File.Data)
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			if r.crds == CRDsCreate {
				a := o.GetAnnotations()
				if a == nil {
					a = map[string]string{}
				}
				a[apply.AnnotationCreateOnly] = "true"
				o.SetAnnotations(a)
			}
		}
		out = append(out, objs...)
	}
	return out, nil
}

// maxDependencyDepth bounds how deep file:// dependencies nest.
const maxDependencyDepth = 8

// chartLoader loads a chart and its file:// dependencies from a
// repository, within one size budget.
type chartLoader struct {
	root     fs.FS
	repoWide bool
	size     int64
	seen     map[string]bool // chart directories loaded
	reads    []string        // those outside the target's chart
}

// load loads the chart at dir, and the dependencies Chart.yaml names with
// a file:// repository that charts/ does not hold.
func (l *chartLoader) load(ctx context.Context, dir string, depth int) (*chart.Chart, error) {
	fsys, err := fs.Sub(l.root, dir)
	if err != nil {
		return nil, err
	}
	files, err := readChart(ctx, fsys, &l.size)
	if err != nil {
		return nil, err
	}
	chrt, err := loader.LoadFiles(files)
	if err != nil {
		return nil, fmt.Errorf("helm: load chart %s: %w", dir, err)
	}
	have := map[string]bool{}
	for _, d := range chrt.Dependencies() {
		have[d.Name()] = true
	}
	for _, d := range chrt.Metadata.Dependencies {
		if d == nil || have[d.Name] {
			continue
		}
		rel, isFile := strings.CutPrefix(d.Repository, "file://")
		switch {
		case d.Repository == "":
			return nil, fmt.Errorf("helm: %s: dependency %s is not vendored under charts/ and names no file:// repository", dir, d.Name)
		case !isFile:
			return nil, fmt.Errorf("helm: %s: dependency %s needs a chart repository (%q): vendor it under charts/ (helm dependency build), or name it with file://; nothing is downloaded",
				dir, d.Name, d.Repository)
		case !l.repoWide:
			return nil, fmt.Errorf("helm: %s: dependency %s is %s, and only charts/ can be read here", dir, d.Name, d.Repository)
		case depth >= maxDependencyDepth:
			return nil, fmt.Errorf("helm: %s: file:// dependencies nest deeper than %d", dir, maxDependencyDepth)
		}
		sub := path.Join(dir, rel)
		if path.IsAbs(rel) || sub == ".." || strings.HasPrefix(sub, "../") {
			return nil, fmt.Errorf("helm: %s: dependency %s (%s) is outside the repository", dir, d.Name, d.Repository)
		}
		if l.seen[sub] {
			return nil, fmt.Errorf("helm: %s: dependency %s (%s) is loaded twice (a cycle?)", dir, d.Name, d.Repository)
		}
		l.seen[sub] = true
		dep, err := l.load(ctx, sub, depth+1)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("helm: %s: dependency %s (%s) is not in the repository", dir, d.Name, d.Repository)
		}
		if err != nil {
			return nil, err
		}
		if dep.Name() != d.Name {
			return nil, fmt.Errorf("helm: %s: dependency %s (%s) is a chart named %s", dir, d.Name, d.Repository, dep.Name())
		}
		l.reads = append(l.reads, sub)
		chrt.AddDependency(dep)
	}
	return chrt, nil
}

// readChart reads the chart's files, without those .helmignore excludes,
// from what is left of the budget.
func readChart(ctx context.Context, fsys fs.FS, budget *int64) ([]*loader.BufferedFile, error) {
	rules := ignore.Empty()
	if data, err := fs.ReadFile(fsys, ignore.HelmIgnore); err == nil {
		if rules, err = ignore.Parse(bytes.NewReader(data)); err != nil {
			return nil, fmt.Errorf("helm: %s: %w", ignore.HelmIgnore, err)
		}
	}
	rules.AddDefaults()
	var files []*loader.BufferedFile
	err := apply.ReadFiles(ctx, fsys, *budget, func(name string, data []byte) error {
		*budget -= int64(len(data))
		fi, err := fs.Stat(fsys, name)
		if err != nil {
			return err
		}
		if ignoredUnder(rules, name, fsys) || rules.Ignore(name, fi) {
			return nil
		}
		files = append(files, &loader.BufferedFile{Name: name, Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("helm: %w", err)
	}
	return files, nil
}

// ignoredUnder reports whether a directory above name is ignored.
func ignoredUnder(rules *ignore.Rules, name string, fsys fs.FS) bool {
	for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
		if fi, err := fs.Stat(fsys, dir); err == nil && rules.Ignore(dir, fi) {
			return true
		}
	}
	return false
}

// values merges the value files in order, then sets the parameters.
func values(fsys fs.FS, h payload.Helm) (map[string]any, error) {
	vals := map[string]any{}
	for _, name := range h.ValueFiles {
		clean := path.Clean(strings.TrimPrefix(name, "./"))
		if !fs.ValidPath(clean) {
			return nil, fmt.Errorf("helm: value file %q is not inside the chart", name)
		}
		data, err := fs.ReadFile(fsys, clean)
		if err != nil {
			return nil, fmt.Errorf("helm: value file %q: %w", name, err)
		}
		v, err := chartutil.ReadValues(data)
		if err != nil {
			return nil, fmt.Errorf("helm: value file %q: %w", name, err)
		}
		vals = merge(vals, v)
	}
	for _, p := range h.Parameters {
		if p.Name == "" || strings.ContainsAny(p.Name, "=,") {
			return nil, fmt.Errorf("helm: parameter name %q is empty or holds '=' or ','", p.Name)
		}
		if err := strvals.ParseInto(p.Name+"="+escape(p.Value), vals); err != nil {
			return nil, fmt.Errorf("helm: parameter %q: %w", p.Name, err)
		}
	}
	return vals, nil
}

// escape makes v one literal value for strvals.
func escape(v string) string {
	return strings.NewReplacer(`\`, `\\`, `,`, `\,`).Replace(v)
}

// merge merges b over a, maps recursively, as `helm -f a -f b` does.
func merge(a, b map[string]any) map[string]any {
	out := maps.Clone(a)
	for _, k := range slices.Sorted(maps.Keys(b)) {
		if bm, ok := b[k].(map[string]any); ok {
			if am, ok := out[k].(map[string]any); ok {
				out[k] = merge(am, bm)
				continue
			}
		}
		out[k] = b[k]
	}
	return out
}
