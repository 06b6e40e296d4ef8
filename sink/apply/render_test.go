package apply_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/sink/apply"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
)

func TestDecode(t *testing.T) {
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"
	tests := []struct {
		name  string
		in    string
		names []string
		err   string // substring of the error, "" for none
	}{
		{name: "one", in: cm, names: []string{"a"}},
		{name: "empty file", in: "", names: nil},
		{name: "empty documents and comments", in: "---\n# nothing\n---\n" + cm + "---\n\n", names: []string{"a"}},
		{name: "json", in: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"j"}}`, names: []string{"j"}},
		{name: "list", in: "apiVersion: v1\nkind: List\nitems:\n- " + strings.ReplaceAll(cm, "\n", "\n  ") + "\n", names: []string{"a"}},
		{name: "bad yaml names the document", in: cm + "---\nkind: [\n", err: "f.yaml: document 2"},
		{name: "scalar", in: "just a string\n", err: "not a mapping"},
		{name: "sequence", in: "- a\n- b\n", err: "not a mapping"},
		{name: "no kind", in: "apiVersion: v1\nmetadata:\n  name: a\n", err: "kind"},
		{name: "no apiVersion", in: "kind: ConfigMap\nmetadata:\n  name: a\n", err: "apiVersion"},
		{name: "no name", in: "apiVersion: v1\nkind: ConfigMap\n", err: "metadata.name is missing"},
		{name: "duplicate key", in: cm + "data: {}\ndata: {}\n", err: "document 1"},
		{name: "list item without name", in: "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n", err: "item 1"},
		{name: "alias bomb", in: "a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\nh: [*g,*g,*g,*g,*g,*g,*g,*g,*g]\n", err: "document 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, err := apply.Decode("f.yaml", []byte(tt.in))
			if tt.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.err)
				var me *apply.ManifestError
				assert.True(t, errors.As(err, &me))
				assert.Equal(t, "f.yaml", me.File)
				return
			}
			require.NoError(t, err)
			var names []string
			for _, o := range objs {
				names = append(names, o.GetName())
			}
			assert.Equal(t, tt.names, names)
		})
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\n{}\n"))
	f.Add([]byte(`{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}]}`))
	f.Add([]byte("a: &a [*a]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, err := apply.Decode("f.yaml", data)
		if err != nil {
			var me *apply.ManifestError
			if !errors.As(err, &me) || me.File != "f.yaml" {
				t.Fatalf("error without the file: %v", err)
			}
			return
		}
		for _, o := range objs {
			if o.GetName() == "" || o.GetKind() == "" || o.GetAPIVersion() == "" {
				t.Fatalf("object without identity: %v", o.Object)
			}
		}
	})
}

func TestRawWalksManifestsOnly(t *testing.T) {
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	cm := func(name string) *fstest.MapFile {
		return file("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\ndata:\n  value: v\n")
	}
	objs, err := apply.Raw.Render(context.Background(), fstest.MapFS{
		"b.yaml":           cm("b"),
		"a/x.yml":          cm("x"),
		"a/y.JSON":         file(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"y"}}`),
		"notes.txt":        file("not yaml: ["),
		".github/ci.yaml":  file("on: push"),
		"a/.hidden.yaml":   file("kind: ["),
		"charts/README.md": file("# readme"),
	}, payload.Render{})
	require.NoError(t, err)
	var names []string
	for _, o := range objs {
		names = append(names, o.GetName())
	}
	assert.Equal(t, []string{"x", "y", "b"}, names, "lexical order, manifests only, dot-files skipped")

	_, err = apply.Raw.Render(context.Background(), fstest.MapFS{"big.yaml": {Data: make([]byte, apply.MaxManifestSize+1)}}, payload.Render{})
	assert.ErrorContains(t, err, "big.yaml")
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []apply.Config{
		{Conflicts: "Maybe"},
		{Mode: "Sometimes"},
		{Concurrency: -1},
		{WaitTimeout: -1},
		{FieldManager: strings.Repeat("m", 129)},
		{Renderers: map[string]apply.Renderer{"kustomize": nil}},
		{Renderers: map[string]apply.Renderer{"": apply.Raw}},
	} {
		c.Default()
		assert.ErrorIs(t, c.Validate(), apply.ErrInvalidConfig, "%+v", c)
	}
	var c apply.Config
	c.Default()
	assert.NoError(t, c.Validate())
	assert.Equal(t, apply.ConflictForce, c.Conflicts)
	_, err := apply.New(nil, apply.Config{})
	assert.ErrorIs(t, err, apply.ErrInvalidConfig)
}

func TestPayloadSpec(t *testing.T) {
	// A source's own payload type with Render's JSON shape is not read
	// through JSON: it is an error naming its type.
	type sourcePayload struct {
		Renderer string `json:"renderer"`
	}
	tests := []struct {
		name    string
		payload any
		want    payload.Render
		err     string
	}{
		{name: "nil", payload: nil, want: payload.Render{}},
		{name: "render", payload: payload.Render{Renderer: "helm"}, want: payload.Render{Renderer: "helm"}},
		{name: "pointer", payload: &payload.Render{Namespace: "a"}, want: payload.Render{Namespace: "a"}},
		{name: "nil pointer", payload: (*payload.Render)(nil), want: payload.Render{}},
		{name: "same json shape", payload: sourcePayload{Renderer: "helm"}, err: "apply_test.sourcePayload"},
		{name: "map", payload: map[string]any{"renderer": "helm"}, err: "map[string]interface {}"},
		{name: "string", payload: "helm", err: "string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := apply.PayloadSpec(watcher.Target{ID: "t", Payload: tt.payload})
			if tt.err != "" {
				assert.ErrorIs(t, err, apply.ErrInvalidConfig)
				assert.ErrorContains(t, err, "payload "+tt.err+" is not a payload.Render")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}
