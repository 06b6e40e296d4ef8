package watchertest_test

import (
	"context"
	"io/fs"
	"testing"

	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/watchertest"
)

// mySink stands for the sink a user tests: it reads the manifest it is
// given.
type mySink struct{}

func (mySink) Deliver(_ context.Context, c watcher.Change) error {
	_, err := fs.ReadFile(c.FS, "app.yaml")
	return err
}

// The README's test of a user's own sink: a repository to commit to, a fake
// source, a recording sink in front of the sink under test.
func TestMySink(t *testing.T) {
	repo := watchertest.NewRepo(t) // in memory, served on loopback: no git binary, no network
	first := repo.Commit(t, map[string]string{"deploy/app.yaml": "replicas: 1\n"})
	rec := watchertest.NewSink("mine")
	rec.SetHook(mySink{}.Deliver) // the sink under test runs in every delivery
	w := watchertest.NewWatcher(t)
	if err := w.Route(watchertest.NewSource(watcher.Target{ID: "app", URL: repo.URL(), Path: "deploy"}), rec); err != nil {
		t.Fatal(err)
	}
	watchertest.Run(t, w.Run)
	rec.WaitCommit(t, "app", first)

	second := repo.Commit(t, map[string]string{"deploy/app.yaml": "replicas: 2\n"})
	w.Trigger(repo.URL()) // a push hint: poll now
	if c := rec.WaitCommit(t, "app", second); c.From != first {
		t.Errorf("From = %s, want %s", c.From, first)
	}
}
