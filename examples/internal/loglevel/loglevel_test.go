package loglevel

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSet(t *testing.T) {
	level, two := new(slog.LevelVar), 2
	Set(level, &two)
	assert.Equal(t, slog.Level(-2), level.Level(), "V(2) logs")
	Set(level, nil)
	assert.Equal(t, slog.Level(-2), level.Level(), "not said: unchanged")
	Set(nil, &two) // no level to set: nothing happens
}

func TestParse(t *testing.T) {
	n, err := Parse([]byte("clusterName: a\nlogLevel: 2\n"))
	if assert.NoError(t, err) && assert.NotNil(t, n) {
		assert.Equal(t, 2, *n)
	}
	n, err = Parse([]byte("clusterName: a\n"))
	assert.NoError(t, err)
	assert.Nil(t, n, "not said")
	_, err = Parse([]byte("logLevel: -1\n"))
	assert.ErrorContains(t, err, "negative")
	_, err = Parse([]byte("logLevel: loud\n"))
	assert.ErrorContains(t, err, "logLevel")
}
