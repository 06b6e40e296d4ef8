package watcher

import (
	"context"
	"fmt"
	"testing"
)

// A source's set is kept as given when nothing in it needs admitting
// (no copy per target: what a target another replica polls costs), and
// copied, leaving the source's slice as it was, when something does.
func TestUpdateKeepsTheSourcesSetUnlessAdmitChangesIt(t *testing.T) {
	w := New()
	clean := func() []Target {
		return []Target{
			{ID: "a", URL: "https://example.com/r.git", Path: "deploy", Paths: []string{"base", "prod"}},
			{ID: "b", URL: "https://example.com/r.git"},
			{ID: "c", URL: "https://example.com/s.git", Revision: "v1.0.0"},
		}
	}
	t.Run("clean set is shared", func(t *testing.T) {
		r := &route{}
		ts := clean()
		w.update(r, ts)
		if len(r.targets) != 3 || &r.targets[0] != &ts[0] {
			t.Fatalf("the watcher copied a set that admit left alone: %d targets", len(r.targets))
		}
		if cap(r.targets) != len(r.targets) {
			t.Fatalf("the kept set can grow into the source's array: cap %d", cap(r.targets))
		}
	})
	for name, tc := range map[string]struct {
		change func([]Target)
		check  func(t *testing.T, kept, given []Target)
		valid  int
	}{
		"credentials in a URL": {
			change: func(ts []Target) { ts[1].URL = "https://u:s3cret@example.com/r.git" },
			check: func(t *testing.T, kept, given []Target) {
				if kept[1].URL != "https://example.com/r.git" || kept[1].Auth == nil || kept[1].Auth.Password != "s3cret" {
					t.Fatalf("kept %q %+v", kept[1].URL, kept[1].Auth)
				}
				if given[1].URL != "https://u:s3cret@example.com/r.git" || given[1].Auth != nil {
					t.Fatalf("the source's target was changed: %q", given[1].URL)
				}
			},
			valid: 3,
		},
		"a path to clean": {
			change: func(ts []Target) { ts[0].Paths = []string{"base", "./prod/"} },
			check: func(t *testing.T, kept, given []Target) {
				if kept[0].Paths[1] != "prod" || given[0].Paths[1] != "./prod/" {
					t.Fatalf("kept %q, the source's now %q", kept[0].Paths, given[0].Paths)
				}
			},
			valid: 3,
		},
		"an invalid target in the middle": {
			change: func(ts []Target) { ts[1].Revision = "refs/../x" },
			check: func(t *testing.T, kept, given []Target) {
				if kept[0].ID != "a" || kept[1].ID != "c" {
					t.Fatalf("kept %s, %s", kept[0].ID, kept[1].ID)
				}
			},
			valid: 2,
		},
		"an ID twice": {
			change: func(ts []Target) { ts[2].ID = "a" },
			valid:  2,
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := &route{}
			ts := clean()
			tc.change(ts)
			w.update(r, ts)
			if len(r.targets) != tc.valid {
				t.Fatalf("%d valid targets, want %d (invalid: %v)", len(r.targets), tc.valid, r.invalid)
			}
			if &r.targets[0] == &ts[0] {
				t.Fatal("the set was kept as given though admit changed or left out a target")
			}
			if tc.check != nil {
				tc.check(t, r.targets, ts)
			}
		})
	}
}

// ownsNothing is the shard of a replica that polls no remote.
type ownsNothing struct{}

func (ownsNothing) Owns(string) bool         { return false }
func (ownsNothing) Changed() <-chan struct{} { return nil }

// A target another replica polls costs a reconcile no allocation of its
// own: the shard is asked, once per remote, before any bound state is
// made for the target (it was made for every target, then dropped).
func TestTargetsAnotherReplicaPollsAreNotBound(t *testing.T) {
	w := New(WithShard(ownsNothing{}), WithCacheDir(t.TempDir()))
	const targets, remotes = 2000, 20
	ts := make([]Target, targets)
	for i := range ts {
		ts[i] = Target{ID: fmt.Sprintf("t%04d", i), URL: fmt.Sprintf("https://example.com/r%02d.git", i%remotes), Path: "deploy"}
	}
	r := &route{}
	w.routes = []*route{r}
	w.update(r, ts)
	ctx := context.Background()
	if !w.reconcile(ctx) {
		t.Fatal("reconcile failed")
	}
	if st := w.Stats(); st.Unowned != targets || st.Remotes != 0 {
		t.Fatalf("stats %+v: want %d targets another replica polls and no remote", st, targets)
	}
	allocs := testing.AllocsPerRun(3, func() { w.reconcile(ctx) })
	if allocs > targets/10 {
		t.Fatalf("a reconcile of %d targets, none this replica's, made %.0f allocations: the targets are bound before the shard is asked", targets, allocs)
	}
	t.Logf("%.0f allocations for %d targets on %d remotes", allocs, targets, remotes)
}
