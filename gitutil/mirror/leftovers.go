package mirror

import (
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/go-git/go-billy/v5"

	"github.com/modwatch/modwatch/internal/safefile"
)

// A failed operation leaves nothing behind in the mirror, at once: a
// temporary file can hold all the room a full disk had, and the start-up
// cleanup (clearTemporary) comes only with the next process. An operation
// that may write notes the temporaries there are when it begins
// (noteTemporaries) and, when it ends, removes those that appeared
// meanwhile (leftovers.clear): under m.mu the mirror has one writer, so
// they are the operation's own. The writers whose failure another writer
// follows in the same operation clean up as they fail, so that the next
// has the room: go-git's pack writer (packFS) and the git CLI (runGit).

// leftovers is the set of a mirror's temporaries (see temporaries) that
// were there when a step of its work began.
type leftovers map[string]bool

// noteTemporaries is what the mirror in dir holds of temporaries now.
func noteTemporaries(dir string) leftovers { return temporaries(dir) }

// clear removes the temporaries of the mirror in dir that l does not
// hold: those made since l was noted. A nil l removes them all.
func (l leftovers) clear(dir string) {
	for p := range temporaries(dir) {
		if !l[p] {
			_ = os.RemoveAll(p)
		}
	}
}

// temporaries lists, by path, what the mirror's writers make while they
// work and remove or rename when they end: in objects/pack, every file but
// a pack's own (go-git's tmp_pack_* and tmp_obj_*, the git CLI's tmp_pack_*,
// tmp_idx_* and .tmp-*-pack-*, the thin pack's staging), and the .keep
// that git fetch holds a pack with until its refs are written; git's
// quarantine directories; the temporary files of git's update-server-info
// (info/refs_*, objects/info/packs_*), of writeFileAtomic (.tmp-*) and of
// go-git's packed-refs (._packed-refs*); git's lock files; and the git
// CLI's clone beside the mirror.
func temporaries(dir string) map[string]bool {
	out := map[string]bool{}
	list := func(sub string, temporary func(name string, isDir bool) bool) {
		entries, _ := safefile.ReadDir(filepath.Join(dir, sub), safefile.NoFollow) // a link in a directory's place is not followed to clear
		for _, e := range entries {
			if temporary(e.Name(), e.IsDir()) {
				out[filepath.Join(dir, sub, e.Name())] = true
			}
		}
	}
	list(filepath.Join("objects", "pack"), func(n string, _ bool) bool {
		return !strings.HasPrefix(n, "pack-") || strings.HasSuffix(n, ".keep")
	})
	list("objects", func(n string, isDir bool) bool {
		return isDir && (strings.HasPrefix(n, "incoming-") || strings.HasPrefix(n, "tmp_objdir-"))
	})
	list(filepath.Join("objects", "info"), func(n string, _ bool) bool {
		return strings.HasPrefix(n, "packs_") || strings.HasPrefix(n, "tmp_") || strings.HasSuffix(n, ".lock")
	})
	list("info", func(n string, _ bool) bool { return strings.HasPrefix(n, "refs_") })
	list(".", func(n string, _ bool) bool {
		return strings.HasPrefix(n, ".tmp-") || strings.HasPrefix(n, "._packed-refs")
	})
	for _, l := range staleLocks(dir) {
		out[filepath.Join(dir, l)] = true
	}
	if _, err := os.Lstat(dir + ".clone"); err == nil {
		out[dir+".clone"] = true
	}
	return out
}

// clearTemporary removes every temporary of the mirror in dir: what a
// process killed mid-operation left. Callers own the mirror: at open.
func clearTemporary(dir string) { leftovers(nil).clear(dir) }

// lockToWrite takes m.mu for an operation that may write into the mirror,
// and returns what ends it: whatever the operation's end (an error, a
// stop, a panic), what it left among the mirror's temporaries is removed,
// then m.mu released. Use it as
//
//	defer m.lockToWrite()()
func (m *Mirror) lockToWrite() (unlock func()) {
	m.mu.Lock()
	before := noteTemporaries(m.dir)
	return func() {
		defer m.unlock()
		before.clear(m.dir)
	}
}

// packFS is the file system of one pack that go-git's pack writer writes:
// it notes the files the writer opens and makes, so that a pack that
// fails leaves none (undo). go-git's PackWriter, whose pack does not parse
// (a transfer cut short, a full disk, a stop, a corrupt pack), returns
// from Close without closing its temporary pack or removing it: the name
// stays until the next start, and the room until the collector finds the
// descriptors. One whose index or rename fails leaves the index it wrote,
// which names a pack that is not there.
type packFS struct {
	billy.Filesystem
	mu    sync.Mutex
	files []billy.File
	made  []string
}

// note records a file opened, and its name when it was made.
func (f *packFS) note(file billy.File, made string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files = append(f.files, file)
	if made != "" {
		f.made = append(f.made, made)
	}
}

// TempFile makes the temporary pack.
func (f *packFS) TempFile(dir, prefix string) (billy.File, error) {
	file, err := f.Filesystem.TempFile(dir, prefix)
	if err == nil {
		f.note(file, file.Name())
	}
	return file, err
}

// Open opens the temporary pack again, for the indexer.
func (f *packFS) Open(name string) (billy.File, error) {
	file, err := f.Filesystem.Open(name)
	if err == nil {
		f.note(file, "")
	}
	return file, err
}

// Create makes the index; one that was there is not the writer's.
func (f *packFS) Create(name string) (billy.File, error) {
	_, serr := f.Filesystem.Lstat(name)
	file, err := f.Filesystem.Create(name)
	if err == nil {
		made := ""
		if os.IsNotExist(serr) {
			made = name
		}
		f.note(file, made)
	}
	return file, err
}

// Chmod makes what the writer saved read-only, as go-git does.
func (f *packFS) Chmod(name string, mode os.FileMode) error {
	if c, ok := f.Filesystem.(billy.Chmod); ok {
		return c.Chmod(name, mode)
	}
	return nil
}

// undo closes every file the writer opened and removes those it made.
func (f *packFS) undo() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, file := range f.files {
		_ = file.Close() // closed already, for most
	}
	for _, name := range f.made {
		_ = f.Filesystem.Remove(name)
	}
	f.files, f.made = nil, nil
}
