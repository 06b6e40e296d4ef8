package kustomize

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/konfig"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/modwatch/modwatch/sink/apply"
	"github.com/modwatch/modwatch/watcher/payload"
)

// Name is the value of payload.Render.Renderer that selects this renderer.
const Name = payload.RendererKustomize

// MaxTreeSize caps the bytes of the tree copied for kustomize: the
// target's path and what its kustomizations reference elsewhere in the
// repository, together.
const MaxTreeSize = 64 << 20

// repo is where the repository sits in kustomize's in-memory file system.
const repo = "/repo"

// Renderer is the kustomize renderer.
type Renderer struct{}

var _ apply.RepoRenderer = Renderer{}

// New returns the renderer.
func New() Renderer { return Renderer{} }

// Render runs `kustomize build` over fsys alone: a reference outside it is
// an error (see RenderRepo, which the apply sink calls instead).
func (Renderer) Render(ctx context.Context, fsys fs.FS, _ payload.Render) ([]*unstructured.Unstructured, error) {
	objs, _, err := render(ctx, fsys, ".", false)
	return objs, err
}

// RenderRepo runs `kustomize build` over dir of the repository root: the
// kustomizations there may reference bases, components and files anywhere
// in the repository ("../../base"), never outside it, on the host or on
// the network. It returns what it read outside dir, for the watcher to
// deliver the target again when a commit changes it.
func (Renderer) RenderRepo(ctx context.Context, root fs.FS, dir string, _ payload.Render) ([]*unstructured.Unstructured, []string, error) {
	return render(ctx, root, dir, true)
}

func render(ctx context.Context, fsys fs.FS, dir string, repoWide bool) ([]*unstructured.Unstructured, []string, error) {
	dir = path.Clean(dir)
	mem := filesys.MakeFsInMemory()
	c := &copier{fsys: fsys, mem: mem, copied: map[string]bool{}, repoWide: repoWide, dir: dir}
	if err := c.copy(ctx, dir); err != nil {
		return nil, nil, err
	}
	if err := c.follow(ctx); err != nil {
		return nil, nil, err
	}
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(mem, path.Join(repo, dir))
	if err != nil {
		return nil, nil, fmt.Errorf("kustomize: %w", err)
	}
	out, err := rm.AsYaml()
	if err != nil {
		return nil, nil, fmt.Errorf("kustomize: %w", err)
	}
	objs, err := apply.Decode("kustomize build", out)
	return objs, c.reads, err
}

// copier copies into kustomize's in-memory file system the target's path,
// then what its kustomizations reference outside it, transitively.
type copier struct {
	fsys     fs.FS
	mem      filesys.FileSystem
	dir      string          // the target's path
	repoWide bool            // references may leave dir (within the repository)
	copied   map[string]bool // repository paths copied (files and directories)
	pending  []string        // kustomization files copied and not yet followed
	reads    []string        // paths outside dir copied
	total    int64
}

// copy copies p (a file or a directory of the repository) once.
func (c *copier) copy(ctx context.Context, p string) error {
	if c.copied[p] {
		return nil
	}
	c.copied[p] = true
	fi, err := fs.Stat(c.fsys, p)
	if err != nil {
		return err
	}
	if p != c.dir && p != "." && !under(p, c.dir) {
		c.reads = append(c.reads, p)
	}
	add := func(name string, data []byte) error {
		dst := path.Join(repo, name)
		if err := c.mem.MkdirAll(path.Dir(dst)); err != nil {
			return err
		}
		if isKustomization(path.Base(name)) {
			c.pending = append(c.pending, name)
		}
		return c.mem.WriteFile(dst, data)
	}
	if !fi.IsDir() {
		if c.total += fi.Size(); c.total > MaxTreeSize {
			return fmt.Errorf("kustomize: the tree is larger than %d bytes", MaxTreeSize)
		}
		data, err := fs.ReadFile(c.fsys, p)
		if err != nil {
			return err
		}
		return add(p, data)
	}
	sub, err := fs.Sub(c.fsys, p)
	if err != nil {
		return err
	}
	err = apply.ReadFiles(ctx, sub, MaxTreeSize-c.total, func(name string, data []byte) error {
		c.total += int64(len(data))
		return add(path.Join(p, name), data)
	})
	if err != nil {
		return fmt.Errorf("kustomize: %s: %w", p, err)
	}
	return c.mem.MkdirAll(path.Join(repo, p))
}

// under reports whether p is below dir ("." is the repository's root).
func under(p, dir string) bool { return dir == "." || strings.HasPrefix(p, dir+"/") }

// follow reads the kustomizations copied and copies what they reference,
// until nothing new is referenced. A remote reference, one that leaves the
// repository (or, without repoWide, the target's path), and one to
// nothing are errors.
func (c *copier) follow(ctx context.Context) error {
	for len(c.pending) > 0 {
		k := c.pending[0]
		c.pending = c.pending[1:]
		data, err := c.mem.ReadFile(path.Join(repo, k))
		if err != nil {
			return err
		}
		refs, err := references(k, data)
		if err != nil {
			return err
		}
		for _, ref := range refs {
			if remote.MatchString(ref) {
				return fmt.Errorf("kustomize: %s: %q is remote; only references inside the repository are allowed", k, ref)
			}
			p := path.Join(path.Dir(k), ref)
			where := "the repository"
			if !c.repoWide {
				where = "the target's path"
			}
			switch {
			case path.IsAbs(ref) || p == ".." || strings.HasPrefix(p, "../"):
				return fmt.Errorf("kustomize: %s: %q is outside %s", k, ref, where)
			case !c.repoWide && !under(p, c.dir) && p != c.dir:
				return fmt.Errorf("kustomize: %s: %q is not in %s", k, ref, where)
			}
			if c.mem.Exists(path.Join(repo, p)) {
				continue
			}
			if err := c.copy(ctx, p); errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("kustomize: %s: %q is not in %s", k, ref, where)
			} else if err != nil {
				return err
			}
		}
	}
	return nil
}

// references returns the paths a kustomization names: its resources,
// bases, components, patches, generators' files and the like. helmCharts
// are refused (kustomize would run a helm binary).
func references(name string, data []byte) ([]string, error) {
	var k map[string]any
	if err := yaml.Unmarshal(data, &k); err != nil {
		return nil, fmt.Errorf("kustomize: %s: %w", name, err)
	}
	if _, ok := k["helmCharts"]; ok {
		return nil, fmt.Errorf("kustomize: %s: helmCharts needs a helm binary; use the helm renderer", name)
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
	return slices.DeleteFunc(refs, func(r string) bool { return strings.Contains(r, "\n") || r == "" }), nil // inline patches are not paths
}

// remote matches what kustomize would fetch rather than read: URLs, scp-like
// and host-prefixed git references, and go-getter style queries.
var remote = regexp.MustCompile(`://|^git@|^gh:|^(github\.com|gitlab\.com|bitbucket\.org)/|\?(ref|version|submodules|timeout)=|\.git(/|$|\?)|//`)

// pathFields are the kustomization fields whose strings (or whose items'
// "path") name files or directories.
var pathFields = []string{"resources", "bases", "components", "crds", "configurations",
	"generators", "transformers", "validators", "patchesStrategicMerge"}

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
