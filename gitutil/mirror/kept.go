package mirror

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/metrics"
	"slices"

	"github.com/modwatch/modwatch/gitutil/internal/mountfs"
)

// DefaultMaxKept is how many file systems handed on ([Detach]) a mirror
// keeps readable when its options do not say (see [Options.MaxKept]).
const DefaultMaxKept = 64

// ErrReleased is returned (wrapped in a *fs.PathError) by a file system of
// [Mirror.FS] that its mirror released: it was handed on ([Detach]) and
// kept past the mirror's bound ([Options.MaxKept]), the oldest of
// them. It reads nothing more, and holds no pack on disk: ask the mirror
// for a new one.
var ErrReleased = errors.New("mirror: file system released: its mirror keeps no more of the trees handed on (MaxKept)")

// Detach tells the mirror that made fsys, a file system of [Mirror.FS] or
// a [Mount] of such, that whoever asked for it is done reading it and has
// handed it on (the watcher, once a sink's Deliver returned): from now on
// it counts among the mirror's kept file systems until it is garbage
// collected. Once a garbage collection found more than
// [Options.MaxKept] of them still referenced, the oldest are
// released (at the next Detach or fetch): their reads fail with
// [ErrReleased], and the packs a repack replaced that only they read go at
// the next fetch. A file system that is not a mirror's is left alone.
func Detach(fsys fs.FS) {
	switch f := fsys.(type) {
	case *treeFS:
		f.m.detach(f)
	default:
		for _, sub := range mountfs.Joined(fsys) {
			Detach(sub)
		}
	}
}

// KeptStats says what the file systems a mirror handed out hold.
type KeptStats struct {
	// Trees counts the file systems kept: handed on ([Detach]), found
	// referenced by a garbage collection since, and not released (those
	// that [Options.MaxKept] bounds).
	Trees int
	// PackBytes is the size of the packs a repack replaced that stay on
	// disk because a file system handed out may read them (a delivery
	// under way, or one kept): what they pin, beyond the mirror itself.
	PackBytes int64
}

// Kept says what the file systems the mirror handed out hold now. It
// never waits on a fetch.
func (m *Mirror) Kept() KeptStats {
	m.readersMu.Lock()
	defer m.readersMu.Unlock()
	st := KeptStats{PackBytes: m.pinned.Load()}
	now := gcCycles()
	for r, at := range m.kept {
		if survived(at, now) && m.handed[r].Value() != nil {
			st.Trees++
		}
	}
	return st
}

// detach records f as handed on, and releases those kept past the bound.
func (m *Mirror) detach(f *treeFS) {
	m.readersMu.Lock()
	if _, ok := m.readers[f.reader]; ok && !f.released.Load() {
		if m.kept == nil {
			m.kept = map[uint64]uint64{}
		}
		m.kept[f.reader] = gcCycles()
	}
	released := m.overKept()
	m.readersMu.Unlock()
	letGoAll(released)
}

// overKept releases the oldest of the file systems handed on past the
// bound, and returns them, for letGoAll once the caller let go of
// m.readersMu, which it holds. Only those that a garbage collection
// started since they were handed on found referenced count: one that a
// sink dropped is garbage, not kept, and the trees that a sink does keep
// are not released for garbage not collected yet. A released one is no
// reader any more: the packs only it read may go.
func (m *Mirror) overKept() []*treeFS {
	limit := m.opts.MaxKept
	if limit == 0 {
		limit = DefaultMaxKept
	}
	if limit < 0 || len(m.kept) <= limit {
		return nil
	}
	now := gcCycles()
	var old []uint64
	for r, at := range m.kept {
		switch {
		case m.handed[r].Value() == nil:
			delete(m.kept, r) // collected; its cleanup forgets the rest
		case survived(at, now):
			old = append(old, r)
		}
	}
	if len(old) <= limit {
		return nil
	}
	slices.Sort(old) // by number: the oldest first
	var out []*treeFS
	for _, r := range old[:len(old)-limit] {
		if f := m.handed[r].Value(); f != nil {
			f.released.Store(true)
			out = append(out, f)
		}
		delete(m.kept, r)
		delete(m.readers, r)
		delete(m.handed, r)
	}
	return out
}

// letGoAll closes the packs of file systems just released, those not
// being read now: a read under way does it as it ends (see checked).
func letGoAll(released []*treeFS) {
	for _, f := range released {
		if f.mu.TryLock() {
			f.letGo()
			f.mu.Unlock()
		}
	}
}

// letGo closes the packs of a released file system and forgets them, so
// that it keeps none open, nor their indexes mapped; the caller holds
// f.mu.
func (f *treeFS) letGo() {
	f.st.Release()
	f.trees, f.entries = nil, 0
}

// survived reports whether a file system handed on when at collections
// were done, found referenced now, was by a collection that started after
// it was handed on (the one under way then may have marked it before).
func survived(at, now uint64) bool { return now >= at+2 }

// gcCycles is the number of garbage collections completed so far.
func gcCycles() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// notePinned records the size of the replaced packs on disk (see
// KeptStats.PackBytes). Callers hold m.mu.
func (m *Mirror) notePinned() {
	var n int64
	packDir := filepath.Join(m.dir, "objects", "pack")
	for p := range m.replaced {
		for _, ext := range []string{".pack", ".idx", ".rev"} {
			if fi, err := os.Stat(filepath.Join(packDir, p+ext)); err == nil {
				n += fi.Size()
			}
		}
	}
	m.pinned.Store(n)
}
