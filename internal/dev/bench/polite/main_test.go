package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The benchmark at a small scale (20 remotes at 10 requests a second:
// about 4 s of start-up) writes its table with every row.
func TestPoliteWritesItsTable(t *testing.T) {
	out := filepath.Join(t.TempDir(), "polite.md")
	if err := run(config{remotes: 20, rate: 10, timeout: 2 * time.Minute, out: out}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	table := string(b)
	for _, row := range []string{
		"| P15 | most requests received in any 1 s, start-up of 20 remotes on one host, budget 10/s burst 2 |",
		"| P15 | start-up, Run to every target delivered, budget 10/s (",
		"| P15 | the same start-up with no budget (the default: ",
		"| P15 | a listing's or fetch's wait for its turn at the host (Event.Waited): median / max, with the budget |",
	} {
		if !strings.Contains(table, row) {
			t.Errorf("no row %q in\n%s", row, table)
		}
	}
	if n := strings.Count(table, "\n| P15 |"); n != 4 {
		t.Errorf("%d rows, want 4:\n%s", n, table)
	}
}

func TestPoliteRefusesNoRemoteOrNoRate(t *testing.T) {
	for _, c := range []config{{remotes: 0, rate: 10}, {remotes: 10, rate: 0}} {
		if err := run(c); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}
