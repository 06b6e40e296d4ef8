package static_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/modwatch/modwatch/source/static"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParse(t *testing.T) {
	ts, err := static.Parse([]byte(`
targets:
  - id: podinfo
    url: https://github.com/stefanprodan/podinfo
    revision: ">=6.0.0"
    path: ./kustomize/
    interval: 5m
    payload: {namespace: apps}
  - id: ctl
    url: git@example.com:platform/control.git
    paths: [clusters/prod, base]
    ignore: ["*.md", "!keep.md"]
    ignoreFile: .sourceignore
    recurseSubmodules: true
  - id: shop
    url: https://h/shop.git
    render: {renderer: helm, namespace: shop, helm: {valueFiles: [prod.yaml]}}
`))
	require.NoError(t, err)
	require.Len(t, ts, 3)
	assert.Equal(t, watcher.Target{
		ID: "podinfo", URL: "https://github.com/stefanprodan/podinfo", Revision: ">=6.0.0",
		Path: "./kustomize/", Interval: 5 * time.Minute, Payload: map[string]any{"namespace": "apps"},
	}, ts[0])
	assert.Equal(t, "", ts[1].Revision)
	assert.Equal(t, watcher.Target{ID: "ctl", URL: "git@example.com:platform/control.git",
		Paths: []string{"clusters/prod", "base"}, Ignore: []string{"*.md", "!keep.md"}, IgnoreFile: ".sourceignore", RecurseSubmodules: true}, ts[1])
	assert.Nil(t, ts[1].Payload)
	assert.Equal(t, payload.Render{Renderer: "helm", Namespace: "shop", Helm: &payload.Helm{ValueFiles: []string{"prod.yaml"}}}, ts[2].Payload)
	for _, tgt := range ts {
		require.NoError(t, tgt.Validate())
	}
}

func TestParseErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"missing id", "targets: [{url: https://h/r}]", "targets[0].id: required"},
		{"missing url", "targets: [{id: a}]", "targets[0].url: required"},
		{"bad scheme", "targets: [{id: a, url: 'ftp://h/r'}]", "targets[0].url"},
		{"dotdot path", "targets: [{id: a, url: 'https://h/r', path: ../etc}]", "targets[0].path"},
		{"dotdot paths", "targets: [{id: a, url: 'https://h/r', paths: [ok, ../etc]}]", "targets[0].paths/ignore: paths: mirror: invalid path"},
		{"ignore file with a slash", "targets: [{id: a, url: 'https://h/r', ignoreFile: ../x}]", "targets[0].paths/ignore: mirror: invalid selection"},
		{"bad revision", "targets: [{id: a, url: 'https://h/r', revision: 'a..b'}]", "targets[0].revision"},
		{"bad interval", "targets: [{id: a, url: 'https://h/r', interval: soon}]", "targets[0].interval"},
		{"negative interval", "targets: [{id: a, url: 'https://h/r', interval: -1s}]", "targets[0].interval"},
		{"duplicate id", "targets: [{id: a, url: 'https://h/r'}, {id: a, url: 'https://h/s'}]", "targets[1].id"},
		{"unknown field", "targets: [{id: a, url: 'https://h/r', revison: main}]", "revison"},
		{"render and payload", "targets: [{id: a, url: 'https://h/r', render: {}, payload: {}}]", "targets[0].payload: render and payload are both set"},
		{"nameless helm parameter", "targets: [{id: a, url: 'https://h/r', render: {helm: {parameters: [{value: x}]}}}]", "targets[0].render: payload: invalid: helm.parameters[0]: name is empty"},
		{"unknown render field", "targets: [{id: a, url: 'https://h/r', render: {renderr: helm}}]", "renderr"},
		{"not yaml", "targets: [", "invalid target file"},
		{"wrong type", "targets: {id: a}", "invalid target file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := static.Parse([]byte(tc.yaml))
			require.ErrorIs(t, err, static.ErrInvalidFile)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestLoadAndRun(t *testing.T) {
	p := filepath.Join(t.TempDir(), "targets.yaml")
	require.NoError(t, os.WriteFile(p, []byte("targets: [{id: a, url: 'https://h/r'}]"), 0o644))
	ts, err := static.Load(p)
	require.NoError(t, err)
	_, err = static.Load(p + ".missing")
	require.Error(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	var got [][]watcher.Target
	done := make(chan error)
	go func() {
		done <- static.New(ts...).Run(ctx, func(ts []watcher.Target) { got = append(got, ts) })
	}()
	cancel()
	require.NoError(t, <-done)
	require.Len(t, got, 1)
	assert.Equal(t, "a", got[0][0].ID)
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"targets: [{id: a, url: 'https://h/r'}]",
		"targets:\n  - id: a\n    url: git@h:r\n    revision: '~1.2'\n    path: x/y\n    interval: 1m\n",
		"targets: [{id: a, url: x, payload: {a: [1, {b: c}]}}]",
		"{}", "", "targets: null", "- a", "targets: [{id: a, url: 'https://h/r', path: '../..'}]",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ts, err := static.Parse(data)
		if err != nil {
			if !errors.Is(err, static.ErrInvalidFile) {
				t.Fatalf("error does not wrap ErrInvalidFile: %v", err)
			}
			return
		}
		for _, tgt := range ts {
			if err := tgt.Validate(); err != nil {
				t.Fatalf("Parse accepted a target that does not validate: %v", err)
			}
			if strings.Contains(tgt.Path, "..") && strings.Contains("/"+tgt.Path+"/", "/../") {
				t.Fatalf("path escapes: %q", tgt.Path)
			}
		}
	})
}
