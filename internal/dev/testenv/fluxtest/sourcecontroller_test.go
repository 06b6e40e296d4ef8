package fluxtest_test

import (
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/testenv/fluxtest"
)

// The versions the Makefile builds (from the modules' go.mod) are the
// ones the tests look for.
func TestTheControllersVersionsAreTheBuiltOnes(t *testing.T) {
	for _, c := range []struct{ dir, module, want string }{
		{"sourcecontroller", "source-controller", fluxtest.SourceControllerVersion},
		{"kustomizecontroller", "kustomize-controller", fluxtest.KustomizeControllerVersion},
	} {
		data, err := os.ReadFile("../../testbin/" + c.dir + "/go.mod")
		require.NoError(t, err)
		m := regexp.MustCompile(`(?m)^\s*github\.com/fluxcd/` + c.module + ` (v\S+)`).FindSubmatch(data)
		require.NotNil(t, m, "%s is required by internal/dev/testbin/%s", c.module, c.dir)
		require.Equal(t, c.want, string(m[1]), c.module)
	}
}
