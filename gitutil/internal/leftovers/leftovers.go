package leftovers

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/go-git/go-billy/v5"

	"github.com/modwatch/modwatch/internal/safefile"
)

// Noted is the set of a mirror's temporaries (see temporaries) that were
// there when a step of its work began.
type Noted map[string]bool

// Note is what the mirror in dir holds of temporaries now.
func Note(dir string) Noted { return temporaries(dir) }

// Clear removes the temporaries of the mirror in dir that l does not
// hold: those made since l was noted. A nil l removes them all.
func (l Noted) Clear(dir string) {
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
	for _, l := range StaleLocks(dir) {
		out[filepath.Join(dir, l)] = true
	}
	if _, err := os.Lstat(dir + ".clone"); err == nil {
		out[dir+".clone"] = true
	}
	return out
}

// StaleLocks finds git lock files in a mirror directory. A mirror has one
// writer (its own process, serialized by Mirror.mu), so any lock found at
// open is a leftover from a crash.
func StaleLocks(dir string) []string {
	var locks []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && d.Name() == "objects" {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".lock") {
			rel, _ := filepath.Rel(dir, p)
			locks = append(locks, rel)
		}
		return nil
	})
	return locks
}

// ClearAll removes every temporary of the mirror in dir: what a process
// killed mid-operation left. Callers own the mirror: at open.
func ClearAll(dir string) { Noted(nil).Clear(dir) }

// PackFS is the file system of one pack that go-git's pack writer writes:
// it notes the files the writer opens and makes, so that a pack that
// fails leaves none (Undo). go-git's PackWriter, whose pack does not parse
// (a transfer cut short, a full disk, a stop, a corrupt pack), returns
// from Close without closing its temporary pack or removing it: the name
// stays until the next start, and the room until the collector finds the
// descriptors. One whose index or rename fails leaves the index it wrote,
// which names a pack that is not there.
type PackFS struct {
	billy.Filesystem
	mu    sync.Mutex
	files []billy.File
	made  []string
}

// note records a file opened, and its name when it was made.
func (f *PackFS) note(file billy.File, made string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files = append(f.files, file)
	if made != "" {
		f.made = append(f.made, made)
	}
}

// TempFile makes the temporary pack.
func (f *PackFS) TempFile(dir, prefix string) (billy.File, error) {
	file, err := f.Filesystem.TempFile(dir, prefix)
	if err == nil {
		f.note(file, file.Name())
	}
	return file, err
}

// Open opens the temporary pack again, for the indexer.
func (f *PackFS) Open(name string) (billy.File, error) {
	file, err := f.Filesystem.Open(name)
	if err == nil {
		f.note(file, "")
	}
	return file, err
}

// Create makes the index; one that was there is not the writer's.
func (f *PackFS) Create(name string) (billy.File, error) {
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
func (f *PackFS) Chmod(name string, mode os.FileMode) error {
	if c, ok := f.Filesystem.(billy.Chmod); ok {
		return c.Chmod(name, mode)
	}
	return nil
}

// Undo closes every file the writer opened and removes those it made.
func (f *PackFS) Undo() {
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
