package watchertest_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// A recording sink in front of the sink under test: every attempt is
// recorded, and the deliveries that succeeded.
func ExampleSink() {
	rec := watchertest.NewSink("mine")
	rec.SetHook(func(_ context.Context, c watcher.Change) error {
		if c.To == "bad" {
			return errors.New("refused")
		}
		return nil
	})
	t := watcher.Target{ID: "app", URL: "https://git.example.com/app.git"}
	for _, commit := range []string{"c1", "bad", "c2"} {
		err := rec.Deliver(context.Background(), watcher.Change{Target: t, To: commit})
		fmt.Println(commit, err)
	}
	fmt.Println(len(rec.Attempts()), "attempts,", len(rec.Delivered()), "delivered")
	// Output:
	// c1 <nil>
	// bad refused
	// c2 <nil>
	// 3 attempts, 2 delivered
}
