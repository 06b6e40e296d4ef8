package fluxtest_test

import (
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/testenv/fluxtest"
)

// The version the Makefile builds (from the module's go.mod) is the one
// the tests look for.
func TestSourceControllerVersionIsTheBuiltOne(t *testing.T) {
	data, err := os.ReadFile("../../testbin/sourcecontroller/go.mod")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^\s*github\.com/fluxcd/source-controller (v\S+)`).FindSubmatch(data)
	require.NotNil(t, m, "source-controller is required by internal/dev/testbin/sourcecontroller")
	require.Equal(t, fluxtest.SourceControllerVersion, string(m[1]))
}
