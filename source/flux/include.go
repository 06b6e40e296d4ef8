package flux

import (
	"errors"
	"fmt"
	"maps"
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

// includeKeys are the keys of one spec.include entry (what is ""), or
// of its repository ("repository.").
func includeKeys(what string) []string {
	if what == "" {
		return []string{"repository", "fromPath", "toPath"}
	}
	return []string{"name"}
}

// includes reads u's spec.include: each GitRepository included, in u's
// namespace, with its artifact, as objs (by namespace/name, u among them)
// have it, cycles the components of their cycles (includeCycles). One
// not there or without an artifact yet is Flux's IncludeUnavailable
// (NotFound, NoArtifact), retried; a key not read, a name missing, or an
// include that leads back to u, however far, is refused (Stalled): each
// of its artifacts would hold the last, without end.
func includes(u *unstructured.Unstructured, objs map[string]*unstructured.Unstructured, cycles map[string]component) ([]payload.GitRepositoryInclude, error) {
	raw, _, err := unstructured.NestedSlice(u.Object, "spec", "include")
	if err != nil {
		return nil, refused(reasonUnsupported, true, errors.New("flux: spec.include is not a list"))
	}
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
	if _, on := cycles[u.GetNamespace()+"/"+u.GetName()]; on {
		return nil, refused(reasonUnsupported, true, cycleError(u.GetNamespace()+"/"+u.GetName(), objs, cycles))
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
		ref, ok := m["repository"].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("flux: spec.include[%d].repository is not an object", i)
		}
		for _, what := range []string{"", "repository."} {
			obj := m
			if what != "" {
				obj = ref
			}
			for k := range obj {
				if !slices.Contains(includeKeys(what), k) {
					return nil, fmt.Errorf("flux: spec.include[%d].%s%s is not served", i, what, k)
				}
			}
		}
		var inc payload.GitRepositoryInclude
		for _, f := range []struct {
			obj  map[string]any
			key  string
			into *string
		}{{ref, "name", &inc.Name}, {m, "fromPath", &inc.FromPath}, {m, "toPath", &inc.ToPath}} {
			v, set := f.obj[f.key]
			if *f.into, ok = v.(string); set && !ok {
				return nil, fmt.Errorf("flux: spec.include[%d]: %s is not a string", i, f.key)
			}
		}
		if inc.Name == "" {
			return nil, fmt.Errorf("flux: spec.include[%d].repository.name is empty", i)
		}
		if err := inc.Validate(); err != nil {
			return nil, fmt.Errorf("flux: spec.include[%d]: %w", i, err)
		}
		out = append(out, inc)
	}
	return out, nil
}

// includeNames are the names u's spec.include names, read in place.
func includeNames(u *unstructured.Unstructured) []string {
	spec, _ := u.Object["spec"].(map[string]any)
	raw, _ := spec["include"].([]any)
	var out []string
	for _, r := range raw {
		m, _ := r.(map[string]any)
		ref, _ := m["repository"].(map[string]any)
		if n, _ := ref["name"].(string); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// includeCycles finds the GitRepositories of objs (by namespace/name) on
// a cycle of includes, once for a set: each is mapped to the component
// of the include graph it is in (Tarjan's strongly connected components,
// linear in objects and includes); one not on a cycle is not mapped.
func includeCycles(objs map[string]*unstructured.Unstructured) map[string]component {
	t := &tarjan{objs: objs, index: map[string]int{}, low: map[string]int{}, on: map[string]bool{}, comp: map[string]component{}}
	keys := slices.Sorted(maps.Keys(objs))
	for _, k := range keys {
		if _, seen := t.index[k]; !seen && len(includeNames(objs[k])) > 0 {
			t.visit(k)
		}
	}
	return t.comp
}

type tarjan struct {
	objs       map[string]*unstructured.Unstructured
	next       int
	index, low map[string]int
	on         map[string]bool
	stack      []string
	comp       map[string]component
	comps      int
}

// component is a strongly connected component of the include graph: its
// number, and how many GitRepositories it holds.
type component struct{ id, size int }

// edges are the GitRepositories k includes that are there.
func (t *tarjan) edges(k string) []string {
	u := t.objs[k]
	var out []string
	for _, n := range includeNames(u) {
		if d := u.GetNamespace() + "/" + n; t.objs[d] != nil {
			out = append(out, d)
		}
	}
	return out
}

func (t *tarjan) visit(k string) {
	t.index[k], t.low[k] = t.next, t.next
	t.next++
	t.stack = append(t.stack, k)
	t.on[k] = true
	self := false
	for _, d := range t.edges(k) {
		self = self || d == k
		if _, seen := t.index[d]; !seen {
			t.visit(d)
			t.low[k] = min(t.low[k], t.low[d])
		} else if t.on[d] {
			t.low[k] = min(t.low[k], t.index[d])
		}
	}
	if t.low[k] != t.index[k] {
		return
	}
	i := len(t.stack) - 1
	for t.stack[i] != k {
		i--
	}
	members := t.stack[i:]
	t.stack = t.stack[:i]
	for _, m := range members {
		t.on[m] = false
	}
	if len(members) > 1 || self {
		t.comps++
		for _, m := range members {
			t.comp[m] = component{t.comps, len(members)}
		}
	}
}

// cycleError says the cycle key is on: the way round, or, on a
// component of more than maxCycleWay, its size (finding each member's
// way would cost the square of it).
func cycleError(key string, objs map[string]*unstructured.Unstructured, cycles map[string]component) error {
	if n := cycles[key].size; n > maxCycleWay {
		return fmt.Errorf("flux: spec.include: a cycle: %s is one of %d GitRepositories that include each other", objs[key].GetName(), n)
	}
	return fmt.Errorf("flux: spec.include: a cycle: %s", strings.Join(cyclePath(key, objs, cycles), " includes "))
}

// maxCycleWay is the largest cycle a refusal names the way round of.
const maxCycleWay = 16

// cyclePath is a way from key back to itself through the includes of
// its component (comp), as names.
func cyclePath(key string, objs map[string]*unstructured.Unstructured, comp map[string]component) []string {
	from := map[string]string{}
	queue := []string{key}
	for len(queue) > 0 {
		k := queue[0]
		queue = queue[1:]
		u := objs[k]
		for _, n := range includeNames(u) {
			d := u.GetNamespace() + "/" + n
			if comp[d] != comp[key] {
				continue
			}
			if d == key { // back: the way, reversed
				way := []string{objs[key].GetName()}
				for at := k; at != key; at = from[at] {
					way = append(way, objs[at].GetName())
				}
				way = append(way, objs[key].GetName())
				slices.Reverse(way)
				return way
			}
			if _, seen := from[d]; !seen {
				from[d] = k
				queue = append(queue, d)
			}
		}
	}
	return nil
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
	for _, n := range includeNames(u) {
		keys[u.GetNamespace()+"/"+n] = true
	}
}

// newArtifactIncluded reports whether cur, which another GitRepository
// includes, has another artifact than old.
func (s *Source) newArtifactIncluded(old, cur *unstructured.Unstructured) bool {
	if artifactOf(old) == artifactOf(cur) {
		return false
	}
	return s.included.has(cur.GetNamespace() + "/" + cur.GetName())
}

// includeIndex is what the targets of objs read their includes from, for
// a program that serves artifacts (nil otherwise, and when none
// includes another): the GitRepositories by namespace/name, and the
// components of their cycles of includes. It notes which are included.
func (s *Source) includeIndex(objs []any) (map[string]*unstructured.Unstructured, map[string]component) {
	if !s.cfg.Artifacts {
		return nil, nil
	}
	byKey := make(map[string]*unstructured.Unstructured, len(objs))
	keys := map[string]bool{}
	for _, o := range objs {
		if u, ok := o.(*unstructured.Unstructured); ok && u.GetDeletionTimestamp() == nil {
			byKey[u.GetNamespace()+"/"+u.GetName()] = u
			includedBy(u, keys)
		}
	}
	s.included.set(keys)
	if len(keys) == 0 {
		return nil, nil
	}
	s.caughtUp(byKey, keys)
	return byKey, includeCycles(byKey)
}

// caughtUp pokes when an included GitRepository has a new artifact since
// objs were listed: its update, seen before it was known to be
// included, poked nothing (newArtifactIncluded).
func (s *Source) caughtUp(objs map[string]*unstructured.Unstructured, keys map[string]bool) {
	if s.store == nil {
		return
	}
	for k := range keys {
		listed, ok := objs[k]
		if !ok {
			continue
		}
		cur, exists, err := s.store.GetByKey(k)
		if u, isU := cur.(*unstructured.Unstructured); err == nil && exists && isU && artifactOf(u) != artifactOf(listed) {
			s.poke()
			return
		}
	}
}

// artifactOf is what tells u's artifact from another: its digest,
// revision, path and URL, read as strings (a value of another type is
// none).
func artifactOf(u *unstructured.Unstructured) [4]string {
	status, _ := u.Object["status"].(map[string]any)
	a, _ := status["artifact"].(map[string]any)
	var out [4]string
	for i, k := range []string{"digest", "revision", "path", "url"} {
		out[i], _ = a[k].(string)
	}
	return out
}
