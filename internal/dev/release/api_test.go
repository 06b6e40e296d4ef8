package release_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/modwatch/modwatch/internal/dev/release"
)

// An incompatible change is named by the package and the top-level
// identifier a CHANGELOG entry would name.
func TestAPIChangeIdent(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    release.APIChange
		want string
	}{
		{"a field", release.APIChange{Package: "m/sink/apply", Name: "apply", Message: "Config.Prune: removed"}, "apply.Config"},
		{"a method", release.APIChange{Package: "m/gitutil", Name: "gitutil", Message: "(*Mirror).Close: removed"}, "gitutil.Mirror"},
		{"a package", release.APIChange{Package: "m/watcher/spec", Name: "spec", Message: "package removed"}, "m/watcher/spec"},
		{"a method promoted from an embedded type of another package",
			release.APIChange{Package: "m/source/configmap", Name: "configmap", Message: "github.com/m/watcher/spec.GitSync.Render: changed from func() to func()"},
			"spec.GitSync"},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.Equal(t, tc.want, tc.c.Ident()) })
	}
}
