package upstream_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/upstream"
)

// Every fixture has the form of the original it stands for: the same key
// paths, each with a value of the same kind, in the ConfigMap and in the
// config.yaml it carries. It is the project's own file, not a copy.
func TestFixturesHaveTheFormOfTheUsersArtifacts(t *testing.T) {
	names, err := upstream.Fixtures()
	require.NoError(t, err)
	require.NotEmpty(t, names)
	for _, rel := range names {
		t.Run(rel, func(t *testing.T) {
			fixture, err := upstream.Fixture(rel)
			require.NoError(t, err)
			original, err := os.ReadFile(upstream.Require(t, rel))
			require.NoError(t, err)
			want, err := upstream.Shape(original)
			require.NoError(t, err)
			got, err := upstream.Shape(fixture)
			require.NoError(t, err)
			assert.Empty(t, upstream.ShapeDiff(want, got), "the fixture's form against the original's")
			assert.NotEqual(t, string(original), string(fixture), "a fixture is written here, not copied")
		})
	}
}

func TestShape(t *testing.T) {
	tests := []struct {
		name, doc string
		want      map[string]string
	}{
		{"scalars", "a: 1\nb: x\nc: true\nd: null\n", map[string]string{"": "map", "a": "number", "b": "string", "c": "bool", "d": "null"}},
		{"list of maps", "l:\n- k: v\n- {}\n", map[string]string{"": "map", "l": "list", "l[0]": "map", "l[0].k": "string", "l[1]": "map"}},
		{"dotted key", "data:\n  a.b: x\n", map[string]string{"": "map", "data": "map", `data.a\.b`: "string"}},
		{"config.yaml read as YAML", "data:\n  config.yaml: |\n    x:\n      z: [1]\n", map[string]string{"": "map", "data": "map", `data.config\.yaml`: "map", `data.config\.yaml.x`: "map", `data.config\.yaml.x.z`: "list", `data.config\.yaml.x.z[0]`: "number"}},
		{"continued string", "k: \"a;\\\n  b\"\n", map[string]string{"": "map", "k": "string"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := upstream.Shape([]byte(tt.doc))
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
	_, err := upstream.Shape([]byte("a: [\n"))
	assert.Error(t, err)
	_, err = upstream.Shape([]byte("data:\n  config.yaml: \"a: [\"\n"))
	assert.ErrorContains(t, err, `data.config\.yaml`)
}

func TestShapeDiff(t *testing.T) {
	want := map[string]string{"a": "map", "a.b": "string", "a.c": "number"}
	got := map[string]string{"a": "map", "a.b": "bool", "a.d": "string"}
	assert.Equal(t, []string{"a.b is a bool, not a string", "added a.d (string)", "missing a.c (number)"}, upstream.ShapeDiff(want, got))
	assert.Empty(t, upstream.ShapeDiff(want, want))
}

// Without the originals, a comparison says SKIP and why; it never fails.
func TestAComparisonWithoutTheOriginalSkips(t *testing.T) {
	t.Setenv("MODWATCH_UPSTREAM", t.TempDir())
	_, err := upstream.Path("numaplane/config/manager/controller-config.yaml")
	require.ErrorIs(t, err, upstream.ErrAbsent)
	rec := &recorder{}
	func() {
		defer func() { _ = recover() }()
		upstream.Require(rec, "numaplane/x.yaml")
	}()
	assert.Equal(t, []any{upstream.SkipMessage("numaplane/x.yaml")}, rec.skipped)
	assert.Nil(t, rec.fatal)
	assert.Contains(t, upstream.SkipMessage("x"), "set MODWATCH_UPSTREAM")
}

type recorder struct{ skipped, fatal []any }

func (*recorder) Helper()             {}
func (r *recorder) Skip(args ...any)  { r.skipped = args; panic("skip") }
func (r *recorder) Fatal(args ...any) { r.fatal = args; panic("fatal") }
