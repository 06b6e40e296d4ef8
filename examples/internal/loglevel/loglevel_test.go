package loglevel

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSet(t *testing.T) {
	level := new(slog.LevelVar)
	require.NoError(t, Set(level, []byte("clusterName: a\nlogLevel: 2\n")))
	assert.Equal(t, slog.Level(-2), level.Level(), "V(2) logs")
	require.NoError(t, Set(level, []byte("clusterName: a\n")))
	assert.Equal(t, slog.Level(-2), level.Level(), "no key: unchanged")
	assert.ErrorContains(t, Set(level, []byte("logLevel: -1\n")), "negative")
	assert.ErrorContains(t, Set(level, []byte("logLevel: loud\n")), "logLevel")
}
