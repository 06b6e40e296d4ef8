package mirror

import (
	"context"
	"io/fs"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
)

// gateContext is a context whose first look (Err) made while m's lock is
// free says so on entered and waits for release; looks counts them all.
type gateContext struct {
	context.Context
	m                *Mirror
	entered, release chan struct{}
	looks, gated     atomic.Int64
}

func newGate(t *testing.T, m *Mirror) *gateContext {
	return &gateContext{Context: ctxT(t), m: m, entered: make(chan struct{}), release: make(chan struct{})}
}

func (c *gateContext) Err() error {
	c.looks.Add(1)
	if !c.m.mu.TryLock() {
		return nil // a look under the lock: the gate would hold it
	}
	c.m.mu.Unlock()
	if c.gated.Add(1) == 1 {
		close(c.entered)
		<-c.release
	}
	return nil
}

// A target whose ignore patterns spend their whole budget holds no lock
// the other targets of its mirror wait on while it is evaluated, and once
// over its budget its selection is refused at once at every commit after:
// the budget is spent once per selection, not once per commit.
func TestAHostileSelectionIsChargedToItsTarget(t *testing.T) {
	m, c, repo := hostileRepo(t)
	hostile := Selection{IgnoreFile: ".sourceignore"}
	gate := newGate(t, m)
	done := make(chan error, 1)
	go func() {
		_, err := m.TreeHash(gate, c, hostile)
		done <- err
	}()
	select {
	case <-gate.entered:
	case <-time.After(time.Minute):
		t.Fatal("the evaluation never looked at its ctx outside the mirror's lock")
	}

	// Another target of the mirror, while the hostile one is inside its
	// evaluation: a plain path, a selection of its own, a file system.
	others := make(chan error, 1)
	go func() {
		_, err := m.TreeHash(ctxT(t), c, at("d0"))
		if err == nil {
			_, err = m.TreeHash(ctxT(t), c, Selection{Path: "d0", Ignore: []string{"*.md"}})
		}
		if err == nil {
			var fsys fs.FS
			if fsys, err = m.FS(c, at("d0")); err == nil {
				_, err = fs.ReadFile(fsys, "f000.yaml")
			}
		}
		others <- err
	}()
	select {
	case err := <-others:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		close(gate.release)
		t.Fatal("another target of the mirror waits on the hostile one's evaluation")
	}
	close(gate.release)
	require.ErrorIs(t, <-done, ErrSelectionBudget)

	// A new commit: the same selection is refused without spending.
	c2 := mustHash(repo.Commit(t, "more", gittest.File("README.md", "x"), gittest.File("d0/d1/d2/d3/d4/d5/d6/d7/d8/f000.yaml", "y")))
	_, err := m.Fetch(ctxT(t), nil, []string{"refs/heads/main"})
	require.NoError(t, err)
	looks := newGate(t, m)
	close(looks.release)
	_, err = m.TreeHash(looks, c2, hostile)
	require.ErrorIs(t, err, ErrSelectionBudget)
	assert.Zero(t, looks.looks.Load(), "refused before any work")

	// The files a commit changed, filtered by hostile patterns: no lock
	// held either.
	gate = newGate(t, m)
	go func() {
		_, err := m.ChangedPaths(gate, c, c2, Selection{IgnoreFile: ".sourceignore", Ignore: []string{"zzz"}})
		done <- err
	}()
	select {
	case <-gate.entered:
	case <-time.After(time.Minute):
		t.Fatal("the filter never looked at its ctx outside the mirror's lock")
	}
	go func() {
		_, err := m.TreeHash(ctxT(t), c2, at("d0"))
		others <- err
	}()
	select {
	case err := <-others:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		close(gate.release)
		t.Fatal("another target of the mirror waits on the hostile one's filter")
	}
	close(gate.release)
	<-done

	// Another selection (the target changed) is evaluated anew.
	h, err := m.TreeHash(ctxT(t), c2, Selection{Path: "d0", IgnoreFile: ".sourceignore", Ignore: []string{"d1/"}})
	require.NoError(t, err)
	assert.False(t, h.IsZero())
}
