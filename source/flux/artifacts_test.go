package flux

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Serving artifacts takes spec.interval and spec.timeout (in any
// spelling of a duration); spec.include is read by includes.
func TestArtifactSpec(t *testing.T) {
	for _, tc := range []struct {
		spec              map[string]any
		interval, timeout time.Duration
		err               string
	}{
		{map[string]any{"interval": "5m"}, 5 * time.Minute, 0, ""},
		{map[string]any{"interval": "1m30s", "timeout": "60s"}, 90 * time.Second, time.Minute, ""},
		{map[string]any{"interval": "1h", "timeout": "60000ms"}, time.Hour, time.Minute, ""},
		{map[string]any{"interval": "1h", "timeout": "2m"}, time.Hour, 2 * time.Minute, ""},
		{map[string]any{"interval": "1h", "timeout": "1.5s"}, time.Hour, 1500 * time.Millisecond, ""},
		{map[string]any{"interval": "1h", "timeout": "soon"}, 0, 0, "spec.timeout \"soon\""},
		{map[string]any{"interval": "1h", "timeout": "0s"}, 0, 0, "spec.timeout \"0s\""},
		{map[string]any{"interval": "1h", "timeout": "-1m"}, 0, 0, "spec.timeout \"-1m\""},
		{map[string]any{"interval": "1h", "include": []any{map[string]any{"repository": map[string]any{"name": "x"}}}}, time.Hour, 0, ""},
		{map[string]any{"interval": "1h", "include": []any{}}, time.Hour, 0, ""},
		{map[string]any{}, 0, 0, "spec.interval \"\""},
		{map[string]any{"interval": "0s"}, 0, 0, "spec.interval \"0s\""},
		{map[string]any{"interval": "-1m"}, 0, 0, "spec.interval \"-1m\""},
	} {
		interval, timeout, err := artifactSpec(&unstructured.Unstructured{Object: map[string]any{"spec": tc.spec}})
		if tc.err != "" {
			assert.ErrorContains(t, err, tc.err, "%v", tc.spec)
			continue
		}
		assert.NoError(t, err, "%v", tc.spec)
		assert.Equal(t, tc.interval, interval, "%v", tc.spec)
		assert.Equal(t, tc.timeout, timeout, "%v", tc.spec)
	}
}

// A semver that is not a range fails the GitRepository, as
// source-controller's semver parse error does, instead of being read as a
// branch or tag name; a semver a tag, name or commit overrides is not
// read.
func TestASemverThatIsNotARangeIsRefused(t *testing.T) {
	for _, tc := range []struct {
		ref map[string]string
		err string
	}{
		{map[string]string{"semver": ">=1.0.0 <2"}, ""},
		{map[string]string{"semver": "1.x"}, ""},
		{map[string]string{"semver": "~1.4"}, ""},
		{map[string]string{"semver": "main"}, "spec.ref.semver \"main\" is not a semver range"},
		{map[string]string{"semver": ">=banana"}, "is not a semver range"},
		{map[string]string{"semver": "main", "tag": "v1.0.0"}, ""},
		{map[string]string{"semver": "main", "name": "refs/heads/x"}, ""},
		{map[string]string{"semver": "main", "commit": "0123456789012345678901234567890123456789"}, ""},
		{map[string]string{"semver": "main", "name": "main"}, ""},
		{map[string]string{"semver": "refs/tags/x", "tag": "x"}, ""},
		{map[string]string{"branch": "main"}, ""},
		{nil, ""},
	} {
		err := semverRange(tc.ref)
		if tc.err == "" {
			assert.NoError(t, err, "%v", tc.ref)
			continue
		}
		assert.ErrorContains(t, err, tc.err, "%v", tc.ref)
	}
}
