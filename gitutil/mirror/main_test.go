package mirror

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/modwatch/modwatch/internal/gittest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, gittest.LeakOptions...)
}
