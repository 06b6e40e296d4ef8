package apply

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/modwatch/modwatch/watcher/payload"
)

// Renderer turns a target's tree into the objects to apply.
type Renderer interface {
	// Render reads fsys (the target's Path at the commit; read-only, safe
	// for concurrent use) and returns the objects, without touching the
	// network or the local disk. An error means nothing is applied; it is
	// not retried until the next commit or resync.
	Render(ctx context.Context, fsys fs.FS, r payload.Render) ([]*unstructured.Unstructured, error)
}

// RepoRenderer is a Renderer that can read the whole repository: root is
// the repository at the commit (watcher.Change.Root), dir the target's
// path in it. It reads what dir references elsewhere in root (a kustomize
// overlay's "../../base"), never outside root, and returns the paths it
// read outside dir (relative to root), so that a commit changing them is
// delivered too. The sink calls it instead of Render when the Change has
// a Root and the target selects a plain path (no Paths, no ignore
// patterns: those narrow what FS shows, and the render reads that).
type RepoRenderer interface {
	Renderer
	RenderRepo(ctx context.Context, root fs.FS, dir string, r payload.Render) (objs []*unstructured.Unstructured, reads []string, err error)
}

// RendererFunc adapts a function to [Renderer].
type RendererFunc func(ctx context.Context, fsys fs.FS, r payload.Render) ([]*unstructured.Unstructured, error)

// Render calls f.
func (f RendererFunc) Render(ctx context.Context, fsys fs.FS, r payload.Render) ([]*unstructured.Unstructured, error) {
	return f(ctx, fsys, r)
}

// MaxManifestSize caps one manifest file read by [Raw].
const MaxManifestSize = 16 << 20

// ManifestError says which file and document could not be decoded.
type ManifestError struct {
	// File is the path in the tree; Doc the 1-based document in it, 0 for
	// the whole file.
	File string
	Doc  int
	Err  error
}

func (e *ManifestError) Error() string {
	if e.Doc == 0 {
		return fmt.Sprintf("apply: %s: %v", e.File, e.Err)
	}
	return fmt.Sprintf("apply: %s: document %d: %v", e.File, e.Doc, e.Err)
}

func (e *ManifestError) Unwrap() error { return e.Err }

// Raw is the built-in renderer: every .yaml, .yml and .json file under the
// tree, recursively and in lexical order, each holding any number of
// documents. Empty documents are skipped; a v1 List is expanded into its
// items; files and directories whose name starts with "." (.github, .git)
// and other files are ignored.
var Raw Renderer = RendererFunc(renderRaw)

func renderRaw(ctx context.Context, fsys fs.FS, _ payload.Render) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p != "." && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		switch strings.ToLower(path.Ext(p)) {
		case ".yaml", ".yml", ".json":
		default:
			return nil
		}
		data, err := readCapped(fsys, p)
		if err != nil {
			return &ManifestError{File: p, Err: err}
		}
		objs, err := Decode(p, data)
		if err != nil {
			return err
		}
		out = append(out, objs...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func readCapped(fsys fs.FS, name string) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxManifestSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxManifestSize {
		return nil, fmt.Errorf("larger than %d bytes", MaxManifestSize)
	}
	return data, nil
}

// Decode parses the YAML or JSON documents in data, read from the file
// named name (for errors). Each document must be one Kubernetes object with
// apiVersion, kind and metadata.name, or a List of them.
func Decode(name string, data []byte) ([]*unstructured.Unstructured, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []*unstructured.Unstructured
	for doc := 1; ; doc++ {
		raw, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, &ManifestError{File: name, Doc: doc, Err: err}
		}
		objs, err := decodeDoc(raw)
		if err != nil {
			return nil, &ManifestError{File: name, Doc: doc, Err: err}
		}
		out = append(out, objs...)
	}
}

func decodeDoc(raw []byte) ([]*unstructured.Unstructured, error) {
	j, err := yaml.YAMLToJSONStrict(raw)
	if err != nil {
		return nil, err
	}
	j = bytes.TrimSpace(j)
	if len(j) == 0 || bytes.Equal(j, []byte("null")) {
		return nil, nil // an empty document or only comments
	}
	if j[0] != '{' {
		return nil, errors.New("not a mapping")
	}
	// Decoded by hand rather than with Unstructured.UnmarshalJSON, whose
	// errors quote the document (a Secret's data, say); utiljson keeps
	// integers int64, as Unstructured needs them.
	var m map[string]any
	if err := utiljson.Unmarshal(j, &m); err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	if err := checkType(u); err != nil {
		return nil, err
	}
	if u.IsList() {
		list, err := u.ToList()
		if err != nil {
			return nil, err
		}
		out := make([]*unstructured.Unstructured, 0, len(list.Items))
		for i := range list.Items {
			item := &list.Items[i]
			if err := checkObject(item); err != nil {
				return nil, fmt.Errorf("item %d: %w", i+1, err)
			}
			out = append(out, item)
		}
		return out, nil
	}
	if err := checkObject(u); err != nil {
		return nil, err
	}
	return []*unstructured.Unstructured{u}, nil
}

func checkType(u *unstructured.Unstructured) error {
	switch {
	case u.GetAPIVersion() == "":
		return errors.New("apiVersion is missing or not a string")
	case u.GetKind() == "":
		return errors.New("kind is missing or not a string")
	}
	return nil
}

func checkObject(u *unstructured.Unstructured) error {
	if err := checkType(u); err != nil {
		return err
	}
	switch {
	case u.GetName() == "":
		return fmt.Errorf("%s: metadata.name is missing", u.GetKind())
	}
	return nil
}

// ReadFiles calls fn with each regular file of fsys (symlinks to files
// followed, symlinks to directories skipped), in lexical order, and fails
// once more than maxTotal bytes were read. Renderers that need the whole
// tree (kustomize, Helm) read it with ReadFiles.
func ReadFiles(ctx context.Context, fsys fs.FS, maxTotal int64, fn func(name string, data []byte) error) error {
	var total int64
	return fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			if fi, err := fs.Stat(fsys, p); err == nil && fi.IsDir() {
				return nil
			}
		}
		f, err := fsys.Open(p)
		if err != nil {
			return err
		}
		data, err := io.ReadAll(io.LimitReader(f, maxTotal-total+1))
		f.Close()
		if err != nil {
			return err
		}
		total += int64(len(data))
		if total > maxTotal {
			return fmt.Errorf("the tree is larger than %d bytes", maxTotal)
		}
		return fn(p, data)
	})
}
