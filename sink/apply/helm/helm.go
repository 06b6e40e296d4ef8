package helm

import (
	"bytes"
	"context"
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
	"github.com/modwatch/modwatch/watcher/spec"
)

// Name is the value of spec.Render.Renderer that selects this renderer.
const Name = spec.RendererHelm

// MaxChartSize caps the bytes of the chart read.
const MaxChartSize = 64 << 20

// Renderer is the Helm renderer.
type Renderer struct{}

var _ apply.Renderer = Renderer{}

// New returns the renderer.
func New() Renderer { return Renderer{} }

// Render templates the chart at fsys's root.
func (Renderer) Render(ctx context.Context, fsys fs.FS, r spec.Render) ([]*unstructured.Unstructured, error) {
	files, err := readChart(ctx, fsys)
	if err != nil {
		return nil, err
	}
	chrt, err := loader.LoadFiles(files)
	if err != nil {
		return nil, fmt.Errorf("helm: load chart: %w", err)
	}
	if missing := missingDependencies(chrt); len(missing) > 0 {
		return nil, fmt.Errorf("helm: dependencies %s are missing from charts/ (they must be vendored: nothing is downloaded)", strings.Join(missing, ", "))
	}
	h := spec.Helm{}
	if r.Helm != nil {
		h = *r.Helm
	}
	vals, err := values(fsys, h)
	if err != nil {
		return nil, err
	}
	if err := chartutil.ProcessDependenciesWithMerge(chrt, vals); err != nil {
		return nil, fmt.Errorf("helm: dependencies: %w", err)
	}
	caps := chartutil.DefaultCapabilities.Copy()
	opts := chartutil.ReleaseOptions{Name: h.ReleaseName, Namespace: r.Namespace, Revision: 1, IsInstall: true}
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

	var out []*unstructured.Unstructured
	for _, crd := range chrt.CRDObjects() {
		objs, err := apply.Decode(crd.Filename, crd.File.Data)
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	for _, m := range manifests {
		objs, err := apply.Decode(m.Name, []byte(m.Content))
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}

// missingDependencies names the dependencies of Chart.yaml that are not
// in charts/.
func missingDependencies(c *chart.Chart) []string {
	have := map[string]bool{}
	for _, d := range c.Dependencies() {
		have[d.Name()] = true
	}
	var missing []string
	for _, d := range c.Metadata.Dependencies {
		if d != nil && !have[d.Name] {
			missing = append(missing, d.Name)
		}
	}
	return missing
}

// readChart reads the chart's files, without those .helmignore excludes.
func readChart(ctx context.Context, fsys fs.FS) ([]*loader.BufferedFile, error) {
	rules := ignore.Empty()
	if data, err := fs.ReadFile(fsys, ignore.HelmIgnore); err == nil {
		if rules, err = ignore.Parse(bytes.NewReader(data)); err != nil {
			return nil, fmt.Errorf("helm: %s: %w", ignore.HelmIgnore, err)
		}
	}
	rules.AddDefaults()
	var files []*loader.BufferedFile
	err := apply.ReadFiles(ctx, fsys, MaxChartSize, func(name string, data []byte) error {
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
func values(fsys fs.FS, h spec.Helm) (map[string]any, error) {
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
