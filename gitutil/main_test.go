package gitutil

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/modwatch/modwatch/internal/dev/gittest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, gittest.LeakOptions...)
}
