package flux

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/modwatch/modwatch/watcher/payload"
)

// Flux's reasons for an include that cannot be read (IncludeUnavailable):
// the GitRepository is not there, or has no artifact yet.
const (
	ReasonIncludeNotFound   = "NotFound"
	ReasonIncludeNoArtifact = "NoArtifact"
)

// maxIncludes bounds a GitRepository's spec.include: each is an archive
// read whole at every delivery.
const maxIncludes = 32

// includeKeys are the keys of one spec.include entry, and of its
// repository.
var (
	includeKeys    = []string{"repository", "fromPath", "toPath"}
	includeRefKeys = []string{"name"}
)

// includes reads u's spec.include: each GitRepository included, in u's
// namespace, with its artifact, as objs (by namespace/name) have it. One
// not there or without an artifact yet is Flux's IncludeUnavailable
// (NotFound, NoArtifact), retried; a key not read, a name missing, or an
// include that leads back to u, however far, is refused (Stalled): each
// of its artifacts would hold the last, without end.
func includes(u *unstructured.Unstructured, objs map[string]*unstructured.Unstructured) ([]payload.GitRepositoryInclude, error) {
	raw, _, _ := unstructured.NestedSlice(u.Object, "spec", "include")
	if len(raw) == 0 {
		return nil, nil
	}
	if len(raw) > maxIncludes {
		return nil, refused(reasonUnsupported, true, fmt.Errorf("flux: spec.include has %d entries, at most %d are served", len(raw), maxIncludes))
	}
	if rec, _, _ := unstructured.NestedBool(u.Object, "spec", "recurseSubmodules"); rec {
		return nil, refused(reasonUnsupported, true, errors.New("flux: spec.include with spec.recurseSubmodules is not served"))
	}
	specs, err := includeSpecs(raw)
	if err != nil {
		return nil, refused(reasonUnsupported, true, err)
	}
	if path := includeCycle(u, objs); path != nil {
		return nil, refused(reasonUnsupported, true, fmt.Errorf("flux: spec.include: a cycle: %s", strings.Join(path, " includes ")))
	}
	out := make([]payload.GitRepositoryInclude, 0, len(specs))
	for _, inc := range specs {
		dep, ok := objs[u.GetNamespace()+"/"+inc.Name]
		if !ok {
			return nil, refused(ReasonIncludeNotFound, false, fmt.Errorf("could not get resource for include '%s': GitRepository not found", inc.Name))
		}
		art, ok, _ := unstructured.NestedMap(dep.Object, "status", "artifact")
		if !ok {
			return nil, refused(ReasonIncludeNoArtifact, false, fmt.Errorf("no artifact available for include '%s'", inc.Name))
		}
		inc.Artifact.Path, _ = art["path"].(string)
		inc.Artifact.URL, _ = art["url"].(string)
		inc.Artifact.Revision, _ = art["revision"].(string)
		inc.Artifact.Digest, _ = art["digest"].(string)
		inc.Artifact.LastUpdateTime, _ = art["lastUpdateTime"].(string)
		inc.Artifact.Size, _, _ = unstructured.NestedInt64(art, "size")
		out = append(out, inc)
	}
	return out, nil
}

// includeSpecs reads spec.include's entries, every key read or refused
// by name.
func includeSpecs(raw []any) ([]payload.GitRepositoryInclude, error) {
	var out []payload.GitRepositoryInclude
	for i, r := range raw {
		m, ok := r.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("flux: spec.include[%d] is not an object", i)
		}
		ref, _ := m["repository"].(map[string]any)
		for what, keys := range map[string][]string{"": includeKeys, "repository.": includeRefKeys} {
			obj := m
			if what != "" {
				obj = ref
			}
			for k := range obj {
				if !slices.Contains(keys, k) {
					return nil, fmt.Errorf("flux: spec.include[%d].%s%s is not served", i, what, k)
				}
			}
		}
		var inc payload.GitRepositoryInclude
		inc.Name, _ = ref["name"].(string)
		inc.FromPath, _ = m["fromPath"].(string)
		inc.ToPath, _ = m["toPath"].(string)
		if inc.Name == "" {
			return nil, fmt.Errorf("flux: spec.include[%d].repository.name is empty", i)
		}
		out = append(out, inc)
	}
	return out, nil
}

// includeCycle returns the names on the way from u back to u through
// spec.include, or nil when there is none.
func includeCycle(u *unstructured.Unstructured, objs map[string]*unstructured.Unstructured) []string {
	ns := u.GetNamespace()
	seen := map[string]bool{}
	var visit func(name string, path []string) []string
	visit = func(name string, path []string) []string {
		path = append(slices.Clip(path), name)
		if len(path) > 1 && name == u.GetName() {
			return path
		}
		if seen[name] {
			return nil
		}
		seen[name] = true
		dep, ok := objs[ns+"/"+name]
		if name == u.GetName() {
			dep, ok = u, true // as it is now
		}
		if !ok {
			return nil
		}
		raw, _, _ := unstructured.NestedSlice(dep.Object, "spec", "include")
		for _, r := range raw {
			m, _ := r.(map[string]any)
			ref, _ := m["repository"].(map[string]any)
			if n, _ := ref["name"].(string); n != "" {
				if p := visit(n, path); p != nil {
					return p
				}
			}
		}
		return nil
	}
	return visit(u.GetName(), nil)
}

// included are the GitRepositories some other includes, by
// namespace/name: a new artifact of one is a new set of targets.
type included struct {
	mu   sync.Mutex
	keys map[string]bool
}

func (i *included) set(keys map[string]bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.keys = keys
}

func (i *included) has(key string) bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.keys[key]
}

// includedBy adds to keys the GitRepositories u includes.
func includedBy(u *unstructured.Unstructured, keys map[string]bool) {
	raw, _, _ := unstructured.NestedSlice(u.Object, "spec", "include")
	for _, r := range raw {
		m, _ := r.(map[string]any)
		ref, _ := m["repository"].(map[string]any)
		if n, _ := ref["name"].(string); n != "" {
			keys[u.GetNamespace()+"/"+n] = true
		}
	}
}

// newArtifactIncluded reports whether cur, which another GitRepository
// includes, has another artifact than old.
func (s *Source) newArtifactIncluded(old, cur *unstructured.Unstructured) bool {
	a, _, _ := unstructured.NestedMap(old.Object, "status", "artifact")
	b, _, _ := unstructured.NestedMap(cur.Object, "status", "artifact")
	if a["digest"] == b["digest"] && a["revision"] == b["revision"] && a["path"] == b["path"] && a["url"] == b["url"] {
		return false
	}
	return s.included.has(cur.GetNamespace() + "/" + cur.GetName())
}
