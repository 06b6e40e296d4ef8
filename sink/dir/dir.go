package dir

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/watcher"
)

// Sink publishes trees under a root directory: root/<link> is a symlink to
// root/.trees/<link>-<commit>-<random>, where <link> is the target's name
// (by default its ID with every character outside [A-Za-z0-9._-] replaced
// by "_"; IDs that differ only there share a link, so give such targets
// names of their own with WithLinkName).
type Sink struct {
	root string
	name func(watcher.Target) string
}

var (
	_ watcher.Sink    = (*Sink)(nil)
	_ watcher.Remover = (*Sink)(nil)
	_ watcher.Namer   = (*Sink)(nil)
)

// Option configures a Sink.
type Option func(*Sink)

// WithLinkName sets how a target's link is named under the root (default:
// its sanitised ID). The name must be a single path element.
func WithLinkName(f func(watcher.Target) string) Option { return func(s *Sink) { s.name = f } }

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// SafeName is the default link name of a target.
func SafeName(t watcher.Target) string {
	n := unsafeChars.ReplaceAllString(t.ID, "_")
	if n == "" || n == "." || n == ".." || strings.HasPrefix(n, ".") {
		n = "_" + n
	}
	return n
}

// New returns a sink publishing under root, which is created when missing.
func New(root string, opts ...Option) *Sink {
	s := &Sink{root: root, name: SafeName}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Name implements watcher.Namer.
func (s *Sink) Name() string { return "dir" }

// Path is where the target's current tree is visible (the symlink).
func (s *Sink) Path(t watcher.Target) string { return filepath.Join(s.root, s.name(t)) }

func (s *Sink) link(t watcher.Target) (string, error) {
	n := s.name(t)
	if n == "" || n == "." || n == ".." || strings.ContainsAny(n, `/\`) || n == ".trees" {
		return "", watcher.Permanent(fmt.Errorf("dir: link name %q of target %s is not a single path element", n, t.ID))
	}
	return n, nil
}

// Deliver writes the change's tree and swaps the target's link to it.
func (s *Sink) Deliver(ctx context.Context, c watcher.Change) error {
	name, err := s.link(c.Target)
	if err != nil {
		return err
	}
	trees := filepath.Join(s.root, ".trees")
	if err := os.MkdirAll(trees, 0o755); err != nil {
		return fmt.Errorf("dir: %w", err)
	}
	treeName := fmt.Sprintf("%s-%s-%s", name, short(c.To), hex.EncodeToString(randBytes(4)))
	tree := filepath.Join(trees, treeName)
	if err := writeTree(ctx, c.FS, tree); err != nil {
		_ = os.RemoveAll(tree)
		err = fmt.Errorf("dir: write %s at %s: %w", c.Target.ID, short(c.To), err)
		if errors.Is(err, gitutil.ErrSymlinkEscape) {
			// The commit itself is wrong: wait for the next one.
			return watcher.Permanent(err)
		}
		return err
	}
	linkPath := filepath.Join(s.root, name)
	old, _ := os.Readlink(linkPath)
	if err := swapLink(filepath.Join(".trees", treeName), linkPath); err != nil {
		_ = os.RemoveAll(tree)
		return fmt.Errorf("dir: publish %s: %w", c.Target.ID, err)
	}
	if old != "" && filepath.Dir(old) == ".trees" {
		_ = os.RemoveAll(filepath.Join(s.root, old))
	}
	return nil
}

// Remove deletes the target's link and tree.
func (s *Sink) Remove(_ context.Context, t watcher.Target) error {
	name, err := s.link(t)
	if err != nil {
		return err
	}
	linkPath := filepath.Join(s.root, name)
	old, err := os.Readlink(linkPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := os.Remove(linkPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("dir: remove %s: %w", t.ID, err)
	}
	if old != "" && filepath.Dir(old) == ".trees" {
		return os.RemoveAll(filepath.Join(s.root, old))
	}
	return nil
}

// swapLink points linkPath at target atomically: a new symlink beside it,
// renamed over it.
func swapLink(target, linkPath string) error {
	tmp := linkPath + ".tmp-" + hex.EncodeToString(randBytes(4))
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, linkPath); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

func randBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// writeTree copies fsys into dir, a new directory. Every write goes through
// an [os.Root] on dir, so nothing in fsys can make it write outside. Links
// are recreated as they are, then judged as the operating system will
// follow them in the finished tree: one that lands outside dir, or that
// dangles with a target whose text leaves dir, fails the whole tree with
// [gitutil.ErrSymlinkEscape]. This holds for any fs.FS, not only the
// watcher's, which refuses such links itself.
func writeTree(ctx context.Context, fsys fs.FS, dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	var links []string
	err = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		name := filepath.FromSlash(p)
		switch {
		case p == ".":
			return nil
		case d.IsDir():
			return root.Mkdir(name, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := fs.ReadLink(fsys, p)
			if err != nil {
				return err
			}
			if !gitutil.LinkInside(path.Dir(p), target) {
				return &fs.PathError{Op: "symlink", Path: p, Err: gitutil.ErrSymlinkEscape}
			}
			links = append(links, name)
			return root.Symlink(filepath.FromSlash(target), name)
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			mode := fs.FileMode(0o644)
			if info.Mode()&0o111 != 0 {
				mode = 0o755
			}
			return copyFile(fsys, root, p, mode)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, l := range links {
		// The root refuses to follow a link out of it; a missing name
		// inside is a link that dangles inside, which its text check
		// above allowed.
		if _, err := root.Stat(l); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return &fs.PathError{Op: "symlink", Path: filepath.ToSlash(l), Err: fmt.Errorf("%w: %v", gitutil.ErrSymlinkEscape, err)}
		}
	}
	return nil
}

func copyFile(fsys fs.FS, root *os.Root, name string, mode fs.FileMode) error {
	src, err := fsys.Open(name)
	if err != nil {
		return err
	}
	defer src.Close()
	f, err := root.OpenFile(filepath.FromSlash(name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, src); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}
