package main

import (
	"context"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/modwatch/modwatch/internal/dev/gittest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, gittest.LeakOptions...)
}

// The demo is what README tells a new user to run: it must succeed.
func TestDemo(t *testing.T) {
	require.NoError(t, demo(context.Background(), logr.Discard()))
}
