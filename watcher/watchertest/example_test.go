package watchertest_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// A recording sink in front of the sink under test: every attempt is
// recorded, and the deliveries that succeeded.
func ExampleSink() {
	rec := watchertest.NewSink("mine")
	bad := gitutil.Hash{0xba, 0xd0}
	rec.SetHook(func(_ context.Context, c watcher.Change) error {
		if c.To == bad {
			return errors.New("refused")
		}
		return nil
	})
	t := watcher.Target{ID: "app", URL: "https://git.example.com/app.git"}
	for _, commit := range []gitutil.Hash{{0xc1}, bad, {0xc2}} {
		err := rec.Deliver(context.Background(), watcher.Change{Target: t, To: commit})
		fmt.Println(commit.String()[:4], err)
	}
	fmt.Println(len(rec.Attempts()), "attempts,", len(rec.Delivered()), "delivered")
	// Output:
	// c100 <nil>
	// bad0 refused
	// c200 <nil>
	// 3 attempts, 2 delivered
}
