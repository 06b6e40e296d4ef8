package kustomize

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/konfig"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/modwatch/modwatch/sink/apply"
	"github.com/modwatch/modwatch/watcher/spec"
)

// Name is the value of spec.Render.Renderer that selects this renderer.
const Name = spec.RendererKustomize

// MaxTreeSize caps the bytes of the tree copied for kustomize.
const MaxTreeSize = 64 << 20

// root is where the tree sits in kustomize's in-memory file system.
const root = "/target"

// Renderer is the kustomize renderer.
type Renderer struct{}

var _ apply.Renderer = Renderer{}

// New returns the renderer.
func New() Renderer { return Renderer{} }

// Render runs `kustomize build` over fsys.
func (Renderer) Render(ctx context.Context, fsys fs.FS, _ spec.Render) ([]*unstructured.Unstructured, error) {
	mem := filesys.MakeFsInMemory()
	if err := copyTree(ctx, fsys, mem); err != nil {
		return nil, err
	}
	if err := checkLocal(mem); err != nil {
		return nil, err
	}
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(mem, root)
	if err != nil {
		return nil, fmt.Errorf("kustomize: %w", err)
	}
	out, err := rm.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("kustomize: %w", err)
	}
	return apply.Decode("kustomize build", out)
}

// copyTree copies fsys under root in mem.
func copyTree(ctx context.Context, fsys fs.FS, mem filesys.FileSystem) error {
	err := apply.ReadFiles(ctx, fsys, MaxTreeSize, func(name string, data []byte) error {
		dst := path.Join(root, name)
		if err := mem.MkdirAll(path.Dir(dst)); err != nil {
			return err
		}
		return mem.WriteFile(dst, data)
	})
	if err != nil {
		return fmt.Errorf("kustomize: %w", err)
	}
	return mem.MkdirAll(root)
}

// remote matches what kustomize would fetch rather than read: URLs, scp-like
// and host-prefixed git references, and go-getter style queries.
var remote = regexp.MustCompile(`://|^git@|^gh:|^(github\.com|gitlab\.com|bitbucket\.org)/|\?(ref|version|submodules|timeout)=|\.git(/|$|\?)|//`)

// pathFields are the kustomization fields whose strings (or whose items'
// "path") name files or directories.
var pathFields = []string{"resources", "bases", "components", "crds", "configurations",
	"generators", "transformers", "validators", "patchesStrategicMerge"}

// checkLocal refuses kustomizations that reference anything outside the
// tree: remote bases and files, and paths that do not exist in it.
func checkLocal(mem filesys.FileSystem) error {
	return mem.Walk(root, func(p string, info fs.FileInfo, err error) error {
		if err != nil || info.IsDir() || !isKustomization(path.Base(p)) {
			return err
		}
		data, err := mem.ReadFile(p)
		if err != nil {
			return err
		}
		var k map[string]any
		if err := yaml.Unmarshal(data, &k); err != nil {
			return fmt.Errorf("kustomize: %s: %w", strings.TrimPrefix(p, root+"/"), err)
		}
		if _, ok := k["helmCharts"]; ok {
			return fmt.Errorf("kustomize: %s: helmCharts needs a helm binary; use the helm renderer", strings.TrimPrefix(p, root+"/"))
		}
		var refs []string
		for _, f := range pathFields {
			refs = append(refs, strs(k[f])...)
		}
		for _, f := range []string{"patches", "patchesJson6902", "replacements"} {
			for _, item := range list(k[f]) {
				if m, ok := item.(map[string]any); ok {
					refs = append(refs, strs(m["path"])...)
				}
			}
		}
		for _, f := range []string{"configMapGenerator", "secretGenerator"} {
			for _, item := range list(k[f]) {
				m, _ := item.(map[string]any)
				for _, src := range append(strs(m["files"]), strs(m["envs"])...) {
					if _, file, ok := strings.Cut(src, "="); ok {
						src = file
					}
					refs = append(refs, src)
				}
				refs = append(refs, strs(m["env"])...)
			}
		}
		if api, ok := k["openapi"].(map[string]any); ok {
			refs = append(refs, strs(api["path"])...)
		}
		dir := path.Dir(p)
		for _, ref := range refs {
			if strings.Contains(ref, "\n") {
				continue // an inline patch, generator or transformer
			}
			rel := strings.TrimPrefix(p, root+"/")
			if remote.MatchString(ref) {
				return fmt.Errorf("kustomize: %s: %q is remote; only references inside the target's path are allowed", rel, ref)
			}
			if !mem.Exists(path.Join(dir, ref)) {
				return fmt.Errorf("kustomize: %s: %q is not in the target's path", rel, ref)
			}
		}
		return nil
	})
}

func isKustomization(name string) bool {
	for _, n := range konfig.RecognizedKustomizationFileNames() {
		if name == n {
			return true
		}
	}
	return false
}

func list(v any) []any {
	l, _ := v.([]any)
	return l
}

// strs returns v's strings: v itself, or the strings in the list v.
func strs(v any) []string {
	if s, ok := v.(string); ok {
		return []string{s}
	}
	var out []string
	for _, item := range list(v) {
		if s, ok := item.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
