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
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/mirror"
	"github.com/modwatch/modwatch/watcher"
)

// Sink publishes trees under a root directory: root/<link> is a symlink to
// root/.trees/<link>-<commit>-<random>, where <link> is the target's name
// (by default its ID with every character outside [A-Za-z0-9._-] replaced
// by "_"; IDs that differ only there share a link, so give such targets
// names of their own with WithLinkName).
//
// A tree is written under a temporary name and renamed when complete, so a
// process killed mid-publish leaves only temporary names, which the sink
// removes when it starts running; the tree a link left is removed at once,
// or after the grace of WithStaleGrace. One sink per root.
type Sink struct {
	root       string
	name       func(watcher.Target) string
	grace      time.Duration
	commitFile string

	mu      sync.Mutex
	busy    map[string]bool      // trees being written or published
	retired map[string]time.Time // trees no link names, by when they go
	wake    chan struct{}
}

var (
	_ watcher.Sink     = (*Sink)(nil)
	_ watcher.Reporter = (*Sink)(nil)
	_ watcher.Remover  = (*Sink)(nil)
	_ watcher.Namer    = (*Sink)(nil)
	_ watcher.Runnable = (*Sink)(nil)
)

// tmpPrefix starts the names of what is not yet published: trees being
// written and links being swapped.
const tmpPrefix = ".tmp-"

// Option configures a Sink.
type Option func(*Sink)

// WithStaleGrace keeps the tree a link pointed at before for d after the
// link moves on (or the target is removed), so that a reader who resolved
// the link just before the swap can finish (git-sync's
// --stale-worktree-timeout). Default 0: removed at once. Retired trees are
// removed by the sink's Run, which the watcher runs, and by later
// deliveries; after a restart, a tree's retirement time is its directory's
// modification time.
func WithStaleGrace(d time.Duration) Option { return func(s *Sink) { s.grace = max(d, 0) } }

// WithCommitFile writes the published commit's hash, and a newline, into
// a file of that name at the top of each tree, for consumers that read the
// revision from the tree (a single path element; a tree that has a file of
// that name fails to publish).
func WithCommitFile(name string) Option { return func(s *Sink) { s.commitFile = name } }

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
	s := &Sink{root: root, name: SafeName, busy: map[string]bool{}, retired: map[string]time.Time{}, wake: make(chan struct{}, 1)}
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
	if n == "" || n == "." || n == ".." || strings.ContainsAny(n, `/\`) || n == ".trees" || strings.HasPrefix(n, tmpPrefix) {
		return "", watcher.Permanent(fmt.Errorf("dir: link name %q of target %s is not a single path element", n, t.ID))
	}
	return n, nil
}

// Published is what a delivery published: the report of
// [Sink.DeliverReport], which a later step of a [watcher.Chain] (a hook)
// reads from [watcher.StepReports].
type Published struct {
	// Link is the target's symlink; Tree the directory it now points at.
	Link, Tree string
}

// PublishedTree is the directory the change was published in.
func (p Published) PublishedTree() string { return p.Tree }

// Deliver writes the change's tree and swaps the target's link to it.
func (s *Sink) Deliver(ctx context.Context, c watcher.Change) error {
	_, err := s.DeliverReport(ctx, c)
	return err
}

// DeliverReport is Deliver that says where the tree went ([Published]).
func (s *Sink) DeliverReport(ctx context.Context, c watcher.Change) (any, error) {
	p, err := s.deliver(ctx, c)
	if err != nil {
		return nil, err
	}
	return p, nil
}

func (s *Sink) deliver(ctx context.Context, c watcher.Change) (Published, error) {
	name, err := s.link(c.Target)
	if err != nil {
		return Published{}, err
	}
	trees := filepath.Join(s.root, ".trees")
	if err := os.MkdirAll(trees, 0o755); err != nil {
		return Published{}, fmt.Errorf("dir: %w", err)
	}
	if err := ownDir(trees); err != nil {
		return Published{}, err
	}
	s.sweep()
	treeName := fmt.Sprintf("%s-%s-%s", name, short(c.To), hex.EncodeToString(randBytes(4)))
	tmpName, tmpLink := tmpPrefix+treeName, tmpPrefix+name+"-"+hex.EncodeToString(randBytes(4))
	s.hold(treeName, tmpName, tmpLink)
	defer s.release(treeName, tmpName, tmpLink)
	tmp, tree := filepath.Join(trees, tmpName), filepath.Join(trees, treeName)
	// Whatever the end (an error, a panic the watcher recovers): once
	// renamed, it is not there.
	defer os.RemoveAll(tmp)
	err = writeTree(ctx, c.FS, tmp)
	if err == nil && s.commitFile != "" {
		err = writeCommitFile(tmp, s.commitFile, c.To.String())
	}
	if err != nil {
		err = fmt.Errorf("dir: write %s at %s: %w", c.Target.ID, short(c.To), err)
		if errors.Is(err, mirror.ErrSymlinkEscape) {
			// The commit itself is wrong: wait for the next one.
			return Published{}, watcher.Permanent(err)
		}
		return Published{}, err
	}
	if err := os.Rename(tmp, tree); err != nil {
		return Published{}, fmt.Errorf("dir: write %s: %w", c.Target.ID, err)
	}
	linkPath := filepath.Join(s.root, name)
	old, _ := os.Readlink(linkPath)
	if err := swapLink(filepath.Join(".trees", treeName), filepath.Join(s.root, tmpLink), linkPath); err != nil {
		_ = os.RemoveAll(tree)
		return Published{}, fmt.Errorf("dir: publish %s: %w", c.Target.ID, err)
	}
	s.retire(old)
	return Published{Link: linkPath, Tree: tree}, nil
}

// Remove deletes the target's link, and its tree (after the grace).
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
	s.retire(old)
	return nil
}

// Run removes what a killed process left (temporary trees and links, and
// trees no link names, once their grace is over), then removes retired
// trees as their grace ends, until ctx is done.
func (s *Sink) Run(ctx context.Context) error {
	if err := s.clearLeftovers(); err != nil {
		return err
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := s.sweep()
		timer.Reset(time.Hour)
		if !next.IsZero() {
			timer.Reset(time.Until(next))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.wake:
		case <-timer.C:
		}
	}
}

// clearLeftovers looks at the root as a killed process left it.
func (s *Sink) clearLeftovers() error {
	entries, err := os.ReadDir(s.root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("dir: %w", err)
	}
	named := map[string]bool{}
	for _, e := range entries {
		if e.Type()&fs.ModeSymlink == 0 {
			continue
		}
		p := filepath.Join(s.root, e.Name())
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			s.mu.Lock()
			if !s.busy[e.Name()] {
				_ = os.Remove(p) // a link that was being swapped in
			}
			s.mu.Unlock()
			continue
		}
		if target, err := os.Readlink(p); err == nil && filepath.Dir(target) == ".trees" {
			named[filepath.Base(target)] = true
		}
	}
	if err := ownDir(filepath.Join(s.root, ".trees")); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	trees, err := os.ReadDir(filepath.Join(s.root, ".trees"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("dir: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range trees {
		n := e.Name()
		switch {
		case s.busy[n] || named[n]:
		case strings.HasPrefix(n, tmpPrefix):
			_ = os.RemoveAll(filepath.Join(s.root, ".trees", n))
		default:
			when := time.Now()
			if info, err := e.Info(); err == nil {
				when = info.ModTime()
			}
			s.retired[n] = when.Add(s.grace)
		}
	}
	s.signal()
	return nil
}

// retire schedules the removal of the tree a link named (its text).
func (s *Sink) retire(link string) {
	if link == "" || filepath.Dir(link) != ".trees" {
		return
	}
	n := filepath.Base(link)
	if s.grace == 0 {
		_ = os.RemoveAll(filepath.Join(s.root, ".trees", n))
		return
	}
	now := time.Now()
	// Its retirement time survives a restart as its modification time.
	_ = os.Chtimes(filepath.Join(s.root, ".trees", n), now, now)
	s.mu.Lock()
	s.retired[n] = now.Add(s.grace)
	s.mu.Unlock()
	s.signal()
}

// sweep removes the retired trees whose grace is over and returns when the
// next one's ends (zero: none).
func (s *Sink) sweep() time.Time {
	now := time.Now()
	var due []string
	var next time.Time
	s.mu.Lock()
	for n, at := range s.retired {
		switch {
		case !at.After(now):
			due = append(due, n)
			delete(s.retired, n)
		case next.IsZero() || at.Before(next):
			next = at
		}
	}
	s.mu.Unlock()
	for _, n := range due {
		_ = os.RemoveAll(filepath.Join(s.root, ".trees", n))
	}
	return next
}

func (s *Sink) hold(names ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range names {
		s.busy[n] = true
	}
}

func (s *Sink) release(names ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range names {
		delete(s.busy, n)
	}
}

func (s *Sink) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// swapLink points linkPath at target atomically: a new symlink beside it
// (tmp), renamed over it.
func swapLink(target, tmp, linkPath string) error {
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
// [mirror.ErrSymlinkEscape]. This holds for any fs.FS, not only the
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
	// Files are copied by a few workers, a batch of one directory's files
	// each, while the walk goes on: reading the store and creating files in
	// the kernel overlap.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(copyWorkers)
	// A walk that panics stops the workers, and waits for them: the tree
	// is removed once they are done.
	defer func() {
		cancel()
		_ = g.Wait()
	}()
	w := &treeWriter{ctx: gctx, fsys: fsys, root: root, g: g}
	walkErr := fs.WalkDir(fsys, ".", w.visit)
	if walkErr == nil {
		w.flush()
	} else {
		cancel() // the tree is lost: the workers stop
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if walkErr != nil {
		return walkErr
	}
	return w.checkLinks()
}

// A treeWriter is one writeTree's walk: directories and links made as the
// walk meets them, files handed to the workers in batches.
type treeWriter struct {
	ctx   context.Context
	fsys  fs.FS
	root  *os.Root
	g     *errgroup.Group
	batch fileBatch
	links []string
}

// visit is the fs.WalkDirFunc of the walk.
func (w *treeWriter) visit(p string, d fs.DirEntry, err error) error {
	if err != nil {
		return err
	}
	if err := w.ctx.Err(); err != nil {
		return err
	}
	name := filepath.FromSlash(p)
	switch {
	case p == ".":
		return nil
	case d.IsDir():
		return w.root.Mkdir(name, 0o755)
	case d.Type()&fs.ModeSymlink != 0:
		target, err := fs.ReadLink(w.fsys, p)
		if err != nil {
			return err
		}
		if !mirror.LinkInside(path.Dir(p), target) {
			return &fs.PathError{Op: "symlink", Path: p, Err: mirror.ErrSymlinkEscape}
		}
		w.links = append(w.links, name)
		return w.root.Symlink(filepath.FromSlash(target), name)
	case d.Type().IsRegular():
		info, err := d.Info()
		if err != nil {
			return err
		}
		mode := fs.FileMode(0o644)
		if info.Mode()&0o111 != 0 {
			mode = 0o755
		}
		if dir := path.Dir(p); dir != w.batch.dir || len(w.batch.files) == batchFiles {
			w.flush()
			w.batch.dir = dir
		}
		w.batch.files = append(w.batch.files, batchFile{p, mode})
	}
	return nil
}

// flush hands the batch so far to a worker.
func (w *treeWriter) flush() {
	if len(w.batch.files) == 0 {
		return
	}
	b := w.batch
	w.batch = fileBatch{}
	w.g.Go(func() error { return b.copy(w.ctx, w.fsys, w.root) })
}

// checkLinks judges the links of the finished tree as the operating system
// follows them.
func (w *treeWriter) checkLinks() error {
	for _, l := range w.links {
		// The root refuses to follow a link out of it; a missing name
		// inside is a link that dangles inside, which its text check
		// in visit allowed.
		if _, err := w.root.Stat(l); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return &fs.PathError{Op: "symlink", Path: filepath.ToSlash(l), Err: fmt.Errorf("%w: %v", mirror.ErrSymlinkEscape, err)}
		}
	}
	return nil
}

// copyWorkers copy files while the walk goes on; batchFiles files of one
// directory make a batch.
const (
	copyWorkers = 4
	batchFiles  = 64
)

type batchFile struct {
	name string // slash-separated, in fsys
	mode fs.FileMode
}

// fileBatch is files of one directory to copy.
type fileBatch struct {
	dir   string
	files []batchFile
}

// copy copies the batch through the os.Root of its directory, opened
// through the tree's root: creating each file through its directory's
// handle spares the kernel a path walk, and the root an open and close of
// every directory on the way, per file.
func (b fileBatch) copy(ctx context.Context, fsys fs.FS, root *os.Root) error {
	dir := root
	if b.dir != "." {
		r, err := root.OpenRoot(filepath.FromSlash(b.dir))
		if err != nil {
			return err
		}
		defer r.Close()
		dir = r
	}
	for _, f := range b.files {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := copyFile(fsys, dir, f.name, f.mode); err != nil {
			return err
		}
	}
	return nil
}

// writeCommitFile writes commit into dir/name, a file the tree must not
// have.
func writeCommitFile(dir, name, commit string) error {
	if name == "." || name == ".." || strings.ContainsAny(name, `/\`) {
		return watcher.Permanent(fmt.Errorf("commit file %q is not a single path element", name))
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return watcher.Permanent(fmt.Errorf("the tree has a file named %q, the commit file", name))
	}
	if err != nil {
		return err
	}
	if _, err := io.WriteString(f, commit+"\n"); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// copyFile copies the file name of fsys into dir, the os.Root of its
// directory.
func copyFile(fsys fs.FS, dir *os.Root, name string, mode fs.FileMode) error {
	src, err := fsys.Open(name)
	if err != nil {
		return err
	}
	defer src.Close()
	f, err := dir.OpenFile(path.Base(name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, src); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// short is commit's text abbreviated.
func short(commit gitutil.Hash) string { return commit.String()[:12] }

// ownDir checks that dir, the sink's own directory of trees, is a
// directory and not a link to one: the sink writes and removes there, and
// never through a link, outside its root.
func ownDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("dir: %s is not a directory of the sink's (%s): nothing is written or removed through it", dir, fi.Mode().Type())
	}
	return nil
}
