package watcher

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Every sentinel error of the package names it, as errors.Is users read
// them in logs.
func TestSentinelsNameThePackage(t *testing.T) {
	for name, err := range map[string]error{
		"ErrStarted": ErrStarted, "ErrNoRoutes": ErrNoRoutes, "ErrInvalidOptions": ErrInvalidOptions,
		"ErrInvalidTarget": ErrInvalidTarget, "ErrCheckpointUnreadable": ErrCheckpointUnreadable,
		"ErrCacheDirInUse": ErrCacheDirInUse, "ErrSinkAbandoned": ErrSinkAbandoned, "ErrUnnamedSink": ErrUnnamedSink,
		"ErrFetchStalled": ErrFetchStalled, "errFetchTimeout": errFetchTimeout, "errHandedOff": errHandedOff,
		"errUnfetched": errUnfetched,
	} {
		t.Run(name, func(t *testing.T) {
			assert.True(t, strings.HasPrefix(err.Error(), "watcher: "), "%q", err)
		})
	}
}
