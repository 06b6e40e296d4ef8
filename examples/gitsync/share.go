package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// sharing is how the mirrors root borrows its objects from are made as
// usable to the volume's consumers as git-sync's root, which holds its
// objects itself: git in the link (another uid of the volume's group, in
// git-sync's docs) reads them through root's objects/info/alternates.
type sharing struct {
	// bits are the read and search bits a umask leaves of 0555: what
	// git-sync's files would have (its umask is 022, or 002).
	bits fs.FileMode
	// gid is root's group when root is set-group-ID (a volume's fsGroup):
	// what is shared is given it, as what is made under root is; -1
	// otherwise.
	gid int
}

// newSharing is the sharing of root under umask.
func newSharing(root string, umask int) sharing {
	s := sharing{bits: 0o555 &^ fs.FileMode(umask), gid: -1}
	if fi, err := os.Stat(root); err == nil && fi.Mode()&fs.ModeSetgid != 0 {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			s.gid = int(st.Gid)
		}
	}
	return s
}

// share makes the cache directory searchable (not listable), each mirror
// directory in it searchable, and each mirror's objects readable. The
// cache directory's own files (its lock, the git configuration, the
// temporary credentials) stay the program's.
func (s sharing) share(cacheDir string, mirrors []string) error {
	if s.bits == 0 {
		return nil
	}
	if err := s.add(cacheDir, s.bits&0o111, true); err != nil {
		return err
	}
	for _, d := range mirrors {
		if err := s.add(d, s.bits&0o111, true); err != nil {
			return err
		}
		err := filepath.WalkDir(filepath.Join(d, "objects"), func(p string, e fs.DirEntry, err error) error {
			switch {
			case errors.Is(err, fs.ErrNotExist):
				return nil // a temporary pack a fetch let go
			case err != nil:
				return err
			case e.Type()&fs.ModeSymlink != 0:
				return nil
			case e.IsDir():
				return s.add(p, s.bits, true)
			}
			return s.add(p, s.bits&0o444, false)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// add adds bits to p's mode, and gives it the shared group (a directory
// its set-group-ID bit, that what is made in it has the group too).
func (s sharing) add(p string, bits fs.FileMode, dir bool) error {
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && s.gid >= 0 && int(st.Gid) != s.gid {
		if err := os.Lchown(p, -1, s.gid); err != nil {
			return err
		}
		fi, err = os.Lstat(p) // a chown drops set-group-ID
		if err != nil {
			return err
		}
	}
	mode := fi.Mode() & (fs.ModePerm | fs.ModeSetgid | fs.ModeSticky)
	want := mode | bits
	if dir && s.gid >= 0 {
		want |= fs.ModeSetgid
	}
	if want == mode {
		return nil
	}
	return os.Chmod(p, want)
}
