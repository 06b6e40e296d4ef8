package upstream

import (
	"fmt"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// Shape returns the form of a YAML document: every key path it holds
// ("data.config\.yaml", "repoCredentials[2].tls.insecureSkipVerify"), each
// with the kind of its value (map, list, string, number, bool, null).
// A string under a key named config.yaml is read as the YAML document it
// is, and its paths continue below it. Values other than those documents
// are left out: two files of one shape may hold different values.
func Shape(doc []byte) (map[string]string, error) {
	var v any
	if err := yaml.Unmarshal(doc, &v); err != nil {
		return nil, err
	}
	out := map[string]string{}
	return out, walkShape(out, "", v)
}

func walkShape(out map[string]string, at string, v any) error {
	switch v := v.(type) {
	case map[string]any:
		out[at] = "map"
		for k, x := range v {
			key := join(at, strings.ReplaceAll(k, ".", `\.`))
			if s, ok := x.(string); ok && k == "config.yaml" {
				var inner any
				if err := yaml.Unmarshal([]byte(s), &inner); err != nil {
					return fmt.Errorf("%s: %w", key, err)
				}
				if err := walkShape(out, key, inner); err != nil {
					return err
				}
				continue
			}
			if err := walkShape(out, key, x); err != nil {
				return err
			}
		}
	case []any:
		out[at] = "list"
		for i, x := range v {
			if err := walkShape(out, fmt.Sprintf("%s[%d]", at, i), x); err != nil {
				return err
			}
		}
	case string:
		out[at] = "string"
	case float64, int64, int:
		out[at] = "number"
	case bool:
		out[at] = "bool"
	case nil:
		out[at] = "null"
	default:
		out[at] = fmt.Sprintf("%T", v)
	}
	return nil
}

func join(at, k string) string {
	if at == "" {
		return k
	}
	return at + "." + k
}

// ShapeDiff lists how the shape got differs from want: a path missing, one
// added, or one of another kind. Empty when they are the same.
func ShapeDiff(want, got map[string]string) []string {
	var diff []string
	for p, k := range want {
		switch g, ok := got[p]; {
		case !ok:
			diff = append(diff, fmt.Sprintf("missing %s (%s)", p, k))
		case g != k:
			diff = append(diff, fmt.Sprintf("%s is a %s, not a %s", p, g, k))
		}
	}
	for p, k := range got {
		if _, ok := want[p]; !ok {
			diff = append(diff, fmt.Sprintf("added %s (%s)", p, k))
		}
	}
	sort.Strings(diff)
	return diff
}
