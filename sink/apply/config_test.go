package apply_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/modwatch/modwatch/sink/apply"
)

// The include mode is one of the two named; an unknown one is refused by
// name, and IncludeSkip without Include (which would leave nothing out).
func TestConfigIncludeMode(t *testing.T) {
	configMaps := func(gk schema.GroupKind) bool { return gk.Kind == "ConfigMap" }
	tests := []struct {
		name    string
		cfg     apply.Config
		wantErr string
	}{
		{name: "strict by default", cfg: apply.Config{Include: configMaps}},
		{name: "skip", cfg: apply.Config{Include: configMaps, IncludeMode: apply.IncludeSkip}},
		{name: "unknown", cfg: apply.Config{Include: configMaps, IncludeMode: "Lenient"}, wantErr: `include mode "Lenient" is neither Strict nor Skip`},
		{name: "skip without include", cfg: apply.Config{IncludeMode: apply.IncludeSkip}, wantErr: "include mode Skip without Include"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Default()
			err := tt.cfg.Validate()
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			assert.ErrorIs(t, err, apply.ErrInvalidConfig)
			assert.ErrorContains(t, err, tt.wantErr)
		})
	}
	cfg := apply.Config{}
	cfg.Default()
	assert.Equal(t, apply.IncludeStrict, cfg.IncludeMode)
}
