package mirror

import (
	"bytes"
	"context"
	"errors"
	"io"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/modwatch/modwatch/gitutil/internal/packview"
)

// A selection's ignore patterns are evaluated outside the mirror's lock,
// on a view of the mirror's packs of their own (as a file system is
// read): a target whose patterns spend their whole budget holds no lock
// another target of the mirror waits on. The memos are under m.selMu.

// selEval is one evaluation of a selection: its view of the store, the
// packs it holds on disk while it reads them, and its budget.
type selEval struct {
	m      *Mirror
	st     *packview.View
	b      *budget
	gen    uint64
	reader uint64
}

// startSelection resolves what selection s keeps at commit, under m.mu:
// the hash of its root (with a nil evaluation when that is all there is
// to say: a file, or a plain entry), or an evaluation to run outside the
// lock on the root tree. A selection over its budget before is refused
// at once.
//
// The root tree returned may be the mirror's own decoded one: the
// evaluation reads its entries, never its lookup map (FindEntry builds it
// at the first call, a write).
func (m *Mirror) startSelection(ctx context.Context, commit plumbing.Hash, s *selector) (*selEval, plumbing.Hash, *object.Tree, error) {
	m.mu.Lock()
	defer m.unlock()
	e, err := m.entryAt(commit, s.root)
	if err != nil {
		return nil, plumbing.ZeroHash, nil, err
	}
	root, err := m.selectionRoot(commit, s, e)
	if err != nil || root == nil {
		return nil, e.Hash, nil, err
	}
	if err := m.overBudgetBefore(s.id); err != nil {
		return nil, plumbing.ZeroHash, nil, err
	}
	ev, err := m.newSelEval(ctx)
	return ev, root.Hash, root, err
}

// newSelEval opens an evaluation's view of the store as it is now, and
// holds its packs. Callers hold m.mu.
func (m *Mirror) newSelEval(ctx context.Context) (*selEval, error) {
	st, err := packview.New(m.dir, &m.indexes, m.replaced, &m.treesRead, packview.NewObjectLRU(cache.MiByte), false)
	if err != nil {
		return nil, m.markCorrupt(err)
	}
	ev := &selEval{m: m, st: st, b: newBudget(ctx), gen: m.gen.Load()}
	ev.reader = m.holdPacks(st)
	return ev, nil
}

// selectionDone returns err, the end of an evaluation of s: one over its
// budget is remembered (see overBudget), one that failed reading the
// store is the mirror's (see readFailed).
func (m *Mirror) selectionDone(ev *selEval, s *selector, err error) error {
	switch {
	case errors.Is(err, ErrSelectionBudget):
		m.overBudget(s.id, err)
	case err != nil && !errors.Is(err, ErrInvalidSelection) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded):
		err = m.readFailed(ev.gen, err)
		m.tell() // no lock is held: the evaluation ran outside them
		return err
	}
	return err
}

// end closes the evaluation's packs and lets them go.
func (e *selEval) end() {
	_ = e.st.Close()
	e.m.readersMu.Lock()
	delete(e.m.readers, e.reader)
	e.m.readersMu.Unlock()
}

// holdPacks records that v reads its packs, so that a repack meanwhile
// keeps them, and returns the record's number. Callers hold m.mu.
func (m *Mirror) holdPacks(v *packview.View) uint64 {
	m.readersMu.Lock()
	defer m.readersMu.Unlock()
	m.nextReader++
	m.readers[m.nextReader] = v.PackNames()
	return m.nextReader
}

func (e *selEval) tree(h plumbing.Hash) (*object.Tree, error) { return object.GetTree(e.st, h) }

// blob reads at most maxIgnoreFile+1 bytes of blob h.
func (e *selEval) blob(h plumbing.Hash) ([]byte, error) {
	b, err := object.GetBlob(e.st, h)
	if err != nil {
		return nil, err
	}
	r, err := b.Reader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var buf bytes.Buffer
	_, err = buf.ReadFrom(io.LimitReader(r, maxIgnoreFile+1))
	return buf.Bytes(), err
}

// memoSelected returns the selected hash memoised for key.
func (m *Mirror) memoSelected(key memoKey) (plumbing.Hash, bool) {
	m.selMu.Lock()
	defer m.selMu.Unlock()
	h, ok := m.selected[key]
	return h, ok
}

// memoSelect memoises the selected hash of key.
func (m *Mirror) memoSelect(key memoKey, h plumbing.Hash) {
	m.selMu.Lock()
	defer m.selMu.Unlock()
	if m.selected == nil || len(m.selected) >= maxSelectMemo {
		m.selected = make(map[memoKey]plumbing.Hash)
	}
	m.selected[key] = h
}

// overBudget remembers that selection id was over its budget: it is
// refused at once from then on, at every commit, not evaluated again
// (each evaluation would spend the budget again). A selection is its
// paths and patterns: a target whose selection changes is evaluated
// anew.
func (m *Mirror) overBudget(id string, err error) {
	m.selMu.Lock()
	defer m.selMu.Unlock()
	if m.overBudgetSel == nil || len(m.overBudgetSel) >= maxOverBudget {
		m.overBudgetSel = map[string]error{}
	}
	m.overBudgetSel[id] = err
}

// overBudgetBefore returns the error of selection id's evaluation that
// was over its budget, if one was.
func (m *Mirror) overBudgetBefore(id string) error {
	m.selMu.Lock()
	defer m.selMu.Unlock()
	return m.overBudgetSel[id]
}
