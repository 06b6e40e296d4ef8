package mirror

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
	"weak"

	"github.com/go-git/go-git/v5"

	"github.com/modwatch/modwatch/gitutil/internal/packview"
	"github.com/modwatch/modwatch/internal/safefile"
)

// DefaultRepackPacks is the number of packs above which a mirror is
// repacked after a fetch (see [Options.RepackPacks]).
const DefaultRepackPacks = 32

// packNames lists the packs of a mirror by base name ("pack-<hash>").
func packNames(dir string) map[string]bool {
	entries, _ := safefile.ReadDir(filepath.Join(dir, "objects", "pack"), safefile.NoFollow)
	out := map[string]bool{}
	for _, e := range entries {
		if base, ok := strings.CutSuffix(e.Name(), ".pack"); ok && strings.HasPrefix(base, "pack-") {
			out[base] = true
		}
	}
	return out
}

// maintain repacks the mirror when a fetch left it with more packs than
// the threshold: one pack per incremental fetch otherwise grows without
// bound, and so does the cost of every lookup. The packs replaced stay on
// disk while a file system handed out may still read them (see
// dropReplaced). It reports whether it repacked. Callers hold m.mu.
func (m *Mirror) maintain(ctx context.Context) (bool, error) {
	if m.partial {
		if err := markPromisorPacks(m.dir); err != nil {
			return false, err
		}
	}
	limit := m.opts.RepackPacks
	if limit == 0 {
		limit = DefaultRepackPacks
	}
	if limit < 0 || len(packNames(m.dir)) <= limit {
		return false, nil
	}
	var keep []string
	if m.opts.GitCLI != "" {
		keep = largePacks(m.dir)
	}
	if made, err := m.repackReplacing(ctx, keep); err != nil || !made {
		return false, err
	}
	m.repacks.Add(1)
	m.dropReplaced()
	return true, m.reopen()
}

// repackReplacing repacks (see repack) and marks the packs it made
// redundant as replaced: every pack but those to keep and those it wrote,
// new or written again under the same name (a pack of the same objects;
// the file is then another, which a reader of the old one keeps reading).
// It reports whether it wrote a pack. Callers hold m.mu.
func (m *Mirror) repackReplacing(ctx context.Context, keep []string) (bool, error) {
	before := packFiles(m.dir)
	if err := m.repack(ctx, keep); err != nil {
		return false, fmt.Errorf("repack: %w", err)
	}
	after := packFiles(m.dir)
	var written []string
	for p, fi := range after {
		if old, ok := before[p]; !ok || !os.SameFile(old, fi) {
			written = append(written, p)
		}
	}
	if len(written) == 0 {
		return false, nil
	}
	for p := range before {
		if _, ok := after[p]; ok && !slices.Contains(keep, p) && !slices.Contains(written, p) {
			m.replaced[p] = true
		}
	}
	m.recordReplaced()
	return true, nil
}

// packFiles is the mirror's packs by base name, with their files' stat.
func packFiles(dir string) map[string]os.FileInfo {
	out := map[string]os.FileInfo{}
	for p := range packNames(dir) {
		if fi, err := os.Stat(filepath.Join(dir, "objects", "pack", p+".pack")); err == nil {
			out[p] = fi
		}
	}
	return out
}

// repack writes one pack of the objects of every pack but those to keep
// (see largePacks), keeping the old packs on disk: with the git CLI when there is one (bounded by
// ctx), with go-git otherwise (which repacks everything). A pack is large,
// and left alone, when it is more than twice all smaller packs together, so
// that the many small packs of incremental fetches are rolled into one
// without rewriting the history under them each time (git's geometric
// repack): the work is amortised to a few times the data fetched.
func (m *Mirror) repack(ctx context.Context, keep []string) error {
	if m.opts.GitCLI == "" {
		// A time before any pack: go-git deletes none of the old ones.
		return m.repo.RepackObjects(&git.RepackConfig{OnlyDeletePacksOlderThan: time.Unix(1, 0)})
	}
	// -a without -d: the old packs are dropped by dropReplaced once no
	// reader holds them.
	args := []string{"repack", "-a", "-q", "--no-write-bitmap-index"}
	for _, p := range keep {
		args = append(args, "--keep-pack="+p+".pack")
	}
	return m.runMaintenance(ctx, args...)
}

// largePacks names the packs that are each more than twice the size of all
// smaller packs together.
func largePacks(dir string) []string {
	type pack struct {
		name string
		size int64
	}
	var packs []pack
	for name := range packNames(dir) {
		if info, err := os.Stat(filepath.Join(dir, "objects", "pack", name+".pack")); err == nil {
			packs = append(packs, pack{name, info.Size()})
		}
	}
	slices.SortFunc(packs, func(a, b pack) int { return cmp.Compare(a.size, b.size) })
	var smaller int64
	var large []string
	for _, p := range packs {
		if smaller > 0 && p.size > 2*smaller {
			large = append(large, p.name)
		}
		smaller += p.size
	}
	return large
}

// dropReplaced deletes the replaced packs that no file system handed out
// may read: those of none that is still referenced (see [Mirror.FS]), after
// it released those kept past the bound (see overKept). Callers hold m.mu.
func (m *Mirror) dropReplaced() {
	m.readersMu.Lock()
	released := m.overKept()
	m.readersMu.Unlock()
	letGoAll(released)
	if len(m.replaced) == 0 {
		return
	}
	held := map[string]bool{}
	m.readersMu.Lock()
	for r, packs := range m.readers {
		if m.handed[r].Value() == nil {
			continue // collected, its cleanup not run yet: it reads nothing
		}
		for _, p := range packs {
			held[p] = true
		}
	}
	m.readersMu.Unlock()
	packDir := filepath.Join(m.dir, "objects", "pack")
	dropped := false
	for p := range m.replaced {
		if held[p] {
			continue
		}
		removePack(packDir, p)
		m.indexes.Forget(p)
		delete(m.replaced, p)
		dropped = true
	}
	if dropped {
		m.recordReplaced()
		_ = m.reopen()
	}
}

// removePack deletes the pack named p (its index first: a pack without
// index is damage, found at open).
func removePack(packDir, p string) {
	for _, ext := range []string{".idx", ".rev", ".pack", ".promisor"} {
		_ = os.Remove(filepath.Join(packDir, p+ext))
	}
}

// replacedFile, in the mirror's directory, names the packs a repack
// replaced and a reader kept (one per line): a process that ends before
// they are dropped leaves them, and the next to open the mirror, which has
// no reader, deletes them.
const replacedFile = "modwatch-replaced"

// recordReplaced writes replacedFile (removes it when no pack is
// replaced). A failure leaves redundant packs on disk at worst. Callers
// hold m.mu.
func (m *Mirror) recordReplaced() {
	m.notePinned()
	path := filepath.Join(m.dir, replacedFile)
	if len(m.replaced) == 0 {
		_ = os.Remove(path)
		return
	}
	names := slices.Sorted(maps.Keys(m.replaced))
	_ = writeFileAtomic(path, []byte(strings.Join(names, "\n")+"\n"))
}

// maxReplacedFile bounds replacedFile read: a pack's name a line, a few
// dozen of them.
const maxReplacedFile = 1 << 20

// dropLeftReplaced deletes the packs replacedFile names, which an earlier
// process replaced and could not drop, when another pack is there (which
// holds what they held), and what a crash left of a write of the file.
// Callers own the mirror: at open.
func dropLeftReplaced(dir string) {
	// A write of the file that a crash cut short (writeFileAtomic's).
	if tmps, err := filepath.Glob(filepath.Join(dir, ".tmp-"+replacedFile+"*")); err == nil {
		for _, t := range tmps {
			_ = os.Remove(t)
		}
	}
	path := filepath.Join(dir, replacedFile)
	data, err := safefile.ReadFile(context.Background(), path, maxReplacedFile, safefile.NoFollow)
	if err != nil {
		return
	}
	packs := packNames(dir)
	var drop []string
	for _, name := range strings.Fields(string(data)) {
		if packs[name] {
			drop = append(drop, name)
		}
	}
	if len(drop) < len(packs) {
		packDir := filepath.Join(dir, "objects", "pack")
		for _, p := range drop {
			removePack(packDir, p)
		}
	}
	_ = os.Remove(path)
}

// addReader records the packs f reads, under a number of its own the
// first time, and sets the cleanup that closes them and forgets the record
// once f is collected. Callers hold m.mu.
func (m *Mirror) addReader(f *treeFS, v *packview.View) {
	m.readersMu.Lock()
	defer m.readersMu.Unlock()
	if f.released.Load() {
		return // it reads nothing more, and holds nothing
	}
	if !v.Named(m.lastPacks) {
		m.lastPacks = v.PackNames()
	}
	if f.reader == 0 {
		m.nextReader++
		f.reader = m.nextReader
		// Packs stay open while the file system is read (one open per
		// object otherwise), a few at most, until Close or the collector.
		runtime.AddCleanup(f, handedOut.end, handedOut{m, v, f.reader})
		if m.handed == nil {
			m.handed = map[uint64]weak.Pointer[treeFS]{}
		}
		m.handed[f.reader] = weak.Make(f)
	}
	m.readers[f.reader] = m.lastPacks // read only
}

// handedOut is what the cleanup of a file system handed out needs: not
// the file system itself, which must be unreachable for it to run.
type handedOut struct {
	m      *Mirror
	st     *packview.View
	reader uint64
}

// end closes the packs of a collected file system and forgets what it
// read, so that a repack's replaced packs can go at the next fetch.
func (h handedOut) end() {
	_ = h.st.Close()
	h.m.readersMu.Lock()
	delete(h.m.readers, h.reader)
	delete(h.m.handed, h.reader)
	delete(h.m.kept, h.reader)
	h.m.readersMu.Unlock()
}

// reopen gives the mirror a fresh view of its store, after packs changed
// behind go-git's back. Callers hold m.mu.
func (m *Mirror) reopen() error {
	repo, err := m.openRepo()
	if err != nil {
		return m.markCorrupt(err)
	}
	m.repo = repo
	return nil
}

// Repacks counts the repacks since the mirror was opened.
func (m *Mirror) Repacks() int64 { return m.repacks.Load() }
