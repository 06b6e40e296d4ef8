package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/mirror"
	"github.com/modwatch/modwatch/internal/safefile"
	"github.com/modwatch/modwatch/watcher"
)

// worktrees publishes the --repo target as git-sync does: root is a git
// repository that borrows the objects of the watcher's mirrors (its
// objects/info/alternates), each commit is a worktree of it at
// root/.worktrees/<hash>, checked out by git, and link is a relative
// symlink to it, swapped atomically. A worktree's history is --depth
// commits deep (root's shallow file), and the mirror holds no more than
// that (its fetches are --depth deep, and a trim after each garbage
// collection drops the rest).
// Run checks the published worktree every period and makes it again when
// it is gone or its HEAD moved, as git-sync's sanity check does.
type worktrees struct {
	root, link string // absolute
	origin     string // the repository's URL: relative submodules are relative to it
	path       string // --path: the link names this directory of the worktree
	git        gitRunner
	mirrors    *mirrorDirs
	depth      int
	// filter is --filter: root is a partial clone of origin, whose
	// checkouts fetch the files the mirror's filtered fetches left out.
	filter     string
	sparseFile string
	submodules string // off, shallow, recursive
	gc         string // auto, always, aggressive, off
	// shared is set when another target reads the repository's mirror (an
	// --also of the same repository): the mirror is then not trimmed.
	shared     bool
	commitFile string
	stale      time.Duration
	period     time.Duration
	// prePublish is called with a new worktree's hash before its link is
	// published; synced after a sync that published (changed) or the first
	// one of the process, as git-sync's hooks and success metrics.
	prePublish func(hash string)
	// credentials are given to git when it fetches submodules, through
	// the program as its credential helper.
	credentials func(*gitutil.Auth) ([]credential, error)
	synced      func(hash string, took time.Duration)
	log         logr.Logger
	// cacheDir holds the mirrors, which sharing makes readable to the
	// volume's consumers before each sync publishes.
	cacheDir string
	sharing  sharing

	mu        sync.Mutex
	current   string        // the hash the link was last published at
	ref       string        // the ref it was resolved from ("" for a commit)
	auth      *gitutil.Auth // the target's, to deepen the mirror with
	first     bool          // a sync has completed in this process
	hasOrigin bool          // root's origin is the repository, since init
	checked   bool          // root was found to be a repository of its own
}

var (
	_ watcher.Sink     = (*worktrees)(nil)
	_ watcher.Runnable = (*worktrees)(nil)
	_ watcher.Namer    = (*worktrees)(nil)
)

// Name implements watcher.Namer.
func (w *worktrees) Name() string { return "worktree" }

func (w *worktrees) worktreeFor(hash string) string {
	return filepath.Join(w.root, ".worktrees", hash)
}

// Deliver publishes c.To, unless the link already names a sound worktree
// of it.
func (w *worktrees) Deliver(ctx context.Context, c watcher.Change) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ref, w.auth = c.Ref, c.Target.Auth
	return w.sync(ctx, c.To.String())
}

// sync is one sync of git-sync's loop, for hash.
func (w *worktrees) sync(ctx context.Context, hash string) error {
	start := time.Now()
	if err := w.initRepo(ctx); err != nil {
		return err
	}
	current := w.currentWorktree()
	changed := current != w.worktreeFor(hash) || !w.sound(hash)
	if changed || !w.first {
		if err := w.deepen(ctx, hash); err != nil {
			return err
		}
	}
	if changed {
		if err := w.create(ctx, hash); err != nil {
			return err
		}
		if w.prePublish != nil {
			w.prePublish(hash)
		}
		if err := w.publish(hash); err != nil {
			return err
		}
		w.retire(current, hash)
	} else if !w.first {
		// The first sync of a process sets the history's depth, which
		// may differ from the last process's (git-sync's fetch does).
		if err := w.writeShallow(ctx, hash); err != nil {
			return err
		}
	}
	w.current = hash
	first := !w.first
	if changed || first {
		w.first = true
		if w.synced != nil {
			w.synced(hash, time.Since(start))
		}
	}
	if err := w.cleanup(ctx, first); err != nil && ctx.Err() == nil {
		w.log.Error(err, "git cleanup failed") // not a stop's
	}
	return nil
}

// Run checks the published worktree every period, makes it again when it
// is not sound, and removes worktrees past --stale-worktree-timeout.
func (w *worktrees) Run(ctx context.Context) error {
	t := time.NewTicker(w.period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		w.mu.Lock()
		if w.current != "" {
			var err error
			if w.currentWorktree() != w.worktreeFor(w.current) || !w.sound(w.current) {
				w.log.V(0).Info("worktree failed checks or was removed; making it again", "hash", w.current)
				err = w.sync(ctx, w.current)
			} else {
				err = w.cleanup(ctx, false) // stale worktrees, and the mirror after them
			}
			if err != nil && ctx.Err() == nil {
				w.log.Error(err, "worktree check failed", "hash", w.current)
			}
		}
		w.mu.Unlock()
	}
}

// currentWorktree is the worktree the link points at (into, with --path),
// absolute ("" when there is no link).
func (w *worktrees) currentWorktree() string {
	target, err := os.Readlink(w.link)
	if err != nil || target == "" {
		return ""
	}
	if !filepath.IsAbs(target) {
		target = filepath.Join(filepath.Dir(w.link), target)
	}
	target = filepath.Clean(target)
	if w.path != "" {
		target = strings.TrimSuffix(target, string(filepath.Separator)+filepath.FromSlash(w.path))
	}
	return target
}

// maxOwnFile bounds a file of the repository or a mirror read whole: a
// worktree's .git and HEAD, the alternates, a shallow file (a hash a
// line).
const maxOwnFile = 16 << 20

// readOwn reads a file git keeps in the repository or a mirror, which is
// never a link, a named pipe or a device: such a one is refused, not
// followed or waited on; so is a file over maxOwnFile.
func readOwn(path string) ([]byte, error) {
	return safefile.ReadFile(context.Background(), path, maxOwnFile, safefile.NoFollow)
}

// sound reports whether hash's worktree is there and at hash: its .git
// file names an administrative directory whose HEAD is hash. (A commit's
// tree may be empty, or sparsely hold nothing: the worktree then has its
// .git only, and is sound.)
func (w *worktrees) sound(hash string) bool {
	wt := w.worktreeFor(hash)
	data, err := readOwn(filepath.Join(wt, ".git"))
	if err != nil {
		return false
	}
	gitdir, ok := strings.CutPrefix(strings.TrimSpace(string(data)), "gitdir: ")
	if !ok {
		return false
	}
	if !filepath.IsAbs(gitdir) {
		gitdir = filepath.Join(wt, gitdir)
	}
	head, err := readOwn(filepath.Join(gitdir, "HEAD"))
	return err == nil && strings.TrimSpace(string(head)) == hash
}

// initRepo makes root a git repository of its own (not one a parent
// directory's repository holds), when it is not, and points it at the
// mirrors' objects.
func (w *worktrees) initRepo(ctx context.Context) error {
	if err := os.MkdirAll(w.root, 0o775); err != nil {
		return err
	}
	if !w.checked || !w.repoThere() {
		w.checked = w.repoSound(ctx)
	}
	if !w.checked {
		w.log.V(0).Info("initializing repo directory", "path", w.root)
		if err := os.RemoveAll(filepath.Join(w.root, ".git")); err != nil {
			return err
		}
		if _, err := w.git.run(ctx, w.root, "init", "-q", "-b", "git-sync"); err != nil {
			return err
		}
		w.hasOrigin, w.checked = false, true
	}
	if !w.hasOrigin {
		// The "origin" remote, as git-sync's: what a relative submodule's
		// URL is relative to.
		if _, err := w.git.run(ctx, w.root, "config", "remote.origin.url", w.origin); err != nil {
			return err
		}
		if err := w.promisor(ctx); err != nil {
			return err
		}
		w.hasOrigin = true
	}
	if w.cacheDir != "" {
		if err := w.sharing.share(w.cacheDir, w.mirrors.all()); err != nil {
			return fmt.Errorf("sharing the mirrors with the volume's consumers: %w", err)
		}
	}
	var alt bytes.Buffer
	objects := filepath.Join(w.root, ".git", "objects")
	for _, d := range w.mirrors.all() {
		fmt.Fprintln(&alt, alternate(objects, filepath.Join(d, "objects")))
	}
	file := filepath.Join(objects, "info", "alternates")
	if old, err := readOwn(file); err == nil && bytes.Equal(old, alt.Bytes()) {
		return nil
	}
	return writeAtomic(file, alt.Bytes())
}

// alternate is the line of root's alternates (in objects) that names a
// mirror's objects: relative when the mirror is under root's volume (git
// reads it relative to objects), so that the volume may be mounted
// elsewhere, as git-sync's root may; absolute otherwise (a --cache-dir
// outside it).
func alternate(objects, mirror string) string {
	root := filepath.Dir(filepath.Dir(objects))
	if rel, err := filepath.Rel(root, mirror); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return mirror
	}
	rel, _ := filepath.Rel(objects, mirror)
	return rel
}

// promisor makes root a partial clone of origin with --filter, as git's
// own partial clone is configured: a checkout then fetches the files it
// reads that neither root nor the mirrors hold, into root's own promisor
// packs. Without --filter, a root that was partial stays so (its promisor
// packs may lack files), as a git-sync repository does.
func (w *worktrees) promisor(ctx context.Context) error {
	if w.filter == "" {
		return nil
	}
	for _, kv := range [][2]string{
		{"core.repositoryformatversion", "1"}, {"extensions.partialClone", "origin"},
		{"remote.origin.promisor", "true"}, {"remote.origin.partialclonefilter", w.filter},
	} {
		if _, err := w.git.run(ctx, w.root, "config", kv[0], kv[1]); err != nil {
			return err
		}
	}
	return nil
}

// checkoutEnv is the environment of the git commands that check files out
// of root: with --filter they fetch what the mirror lacks from origin, with
// the repository's credentials (the program as git's credential helper);
// the submodules' commands get --credential's too.
func (w *worktrees) checkoutEnv(submodules bool) ([]string, error) {
	if w.credentials == nil || (w.filter == "" && !submodules) {
		return nil, nil
	}
	creds, err := w.credentials(w.auth)
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(creds)
	if err != nil {
		return nil, err
	}
	return []string{credentialsEnv + "=" + string(data)}, nil
}

// repoThere reports whether root still has its repository (what a sync
// checks without running git, once repoSound said yes).
func (w *worktrees) repoThere() bool {
	for _, p := range []string{"HEAD", "objects", "config"} {
		if _, err := os.Stat(filepath.Join(w.root, ".git", p)); err != nil {
			return false
		}
	}
	_, err := os.Stat(filepath.Join(w.root, ".git", "shallow.lock"))
	return errors.Is(err, fs.ErrNotExist)
}

// repoSound reports whether root is the top of a git repository with no
// lock left by a crash.
func (w *worktrees) repoSound(ctx context.Context) bool {
	if !w.repoThere() {
		return false // no need to ask git
	}
	top, err := w.git.run(ctx, w.root, "rev-parse", "--show-toplevel")
	if err != nil {
		return false
	}
	real, err := filepath.EvalSymlinks(w.root)
	return err == nil && strings.TrimSpace(top) == real
}

// create makes hash's worktree afresh: its history --depth deep, checked
// out by git (sparsely with --sparse-checkout-file), with its submodules.
func (w *worktrees) create(ctx context.Context, hash string) error {
	wt := w.worktreeFor(hash)
	if _, err := os.Lstat(wt); err == nil {
		// A worktree of that name, left by a crash or another's: gone,
		// and forgotten by git.
		if err := os.RemoveAll(wt); err != nil {
			return err
		}
		if _, err := w.git.run(ctx, w.root, "worktree", "prune"); err != nil {
			return err
		}
	}
	if err := w.writeShallow(ctx, hash); err != nil {
		return err
	}
	sparse := w.sparseFile != "" || w.path != ""
	args := []string{"worktree", "add", "--force", "--detach", wt, hash}
	if sparse {
		args = append(args, "--no-checkout") // checked out once sparse
	}
	env, err := w.checkoutEnv(false)
	if err != nil {
		return err
	}
	if _, err := w.git.runEnv(ctx, w.root, env, args...); err != nil {
		return err
	}
	// A relative reference to root's .git, so that the volume may be
	// mounted elsewhere (git-sync's).
	rel, err := filepath.Rel(wt, filepath.Join(w.root, ".git", "worktrees", hash))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(wt, ".git"), []byte("gitdir: "+rel+"\n"), 0o644); err != nil {
		return err
	}
	if sparse {
		if err := w.sparse(ctx, wt, hash); err != nil {
			return err
		}
		if _, err := w.git.runEnv(ctx, wt, env, "reset", "-q", "--hard", hash, "--"); err != nil {
			return err
		}
	}
	if err := w.updateSubmodules(ctx, wt); err != nil {
		return err
	}
	if err := confined(wt); err != nil {
		_ = os.RemoveAll(wt)
		return watcher.Permanent(fmt.Errorf("commit %s: %w", hash, err))
	}
	if w.commitFile != "" {
		return os.WriteFile(filepath.Join(wt, w.commitFile), []byte(hash+"\n"), 0o644)
	}
	return nil
}

// confined checks that no symlink git checked out in the worktree (its
// submodules' included) resolves outside it: one that does fails the
// commit, as the library's file systems fail it, so that a published path
// never leads out of its directory. A link is judged by its text (an
// absolute one is refused, a relative one must stay inside) and, when it
// resolves, by where it resolves to (a ".." after a link to the top of the
// tree would leave it).
func confined(wt string) error {
	top, err := filepath.EvalSymlinks(wt)
	if err != nil {
		return err
	}
	inside := func(base, p string) bool {
		rel, err := filepath.Rel(base, p)
		return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
	}
	return filepath.WalkDir(wt, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Name() == ".git" && p != wt {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type()&fs.ModeSymlink == 0 {
			return nil
		}
		target, err := os.Readlink(p)
		if err != nil {
			return err
		}
		ok := !filepath.IsAbs(target) && inside(wt, filepath.Join(filepath.Dir(p), target))
		if resolved, err := filepath.EvalSymlinks(p); ok && err == nil {
			ok = inside(top, resolved)
		}
		if !ok {
			name, _ := filepath.Rel(wt, p)
			return fmt.Errorf("symlink %s -> %s leads outside the tree", name, target)
		}
		return nil
	})
}

// sparse configures the worktree's sparse checkout from
// --sparse-checkout-file, or from --path (that directory only).
func (w *worktrees) sparse(ctx context.Context, wt, hash string) error {
	var patterns []byte
	switch {
	case w.sparseFile != "":
		data, err := readMounted(w.sparseFile)
		if err != nil {
			return fmt.Errorf("--sparse-checkout-file: %w", err)
		}
		patterns = data
	case w.path != "":
		patterns = []byte("/" + w.path + "/\n")
	default:
		return nil
	}
	if err := writeAtomic(filepath.Join(w.root, ".git", "worktrees", hash, "info", "sparse-checkout"), patterns); err != nil {
		return err
	}
	_, err := w.git.run(ctx, wt, "sparse-checkout", "init", "--no-cone")
	return err
}

// updateSubmodules checks out the worktree's submodules (--submodules).
func (w *worktrees) updateSubmodules(ctx context.Context, wt string) error {
	if w.submodules == "off" {
		return nil
	}
	if _, err := os.Stat(filepath.Join(wt, ".gitmodules")); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	args := []string{"submodule", "update", "--init"}
	if w.submodules == "recursive" {
		args = append(args, "--recursive")
	}
	if w.depth > 0 {
		args = append(args, "--depth", strconv.Itoa(w.depth))
	}
	env, err := w.checkoutEnv(true)
	if err != nil {
		return err
	}
	_, err = w.git.runEnv(ctx, wt, env, args...)
	return err
}

// writeShallow writes root's shallow file: the commits at --depth from
// hash (whose parents a worktree's history does not show), and those the
// mirrors themselves lack the parents of.
func (w *worktrees) writeShallow(ctx context.Context, hash string) error {
	var shallow []string
	for _, d := range w.mirrors.all() {
		if data, err := readOwn(filepath.Join(d, "shallow")); err == nil {
			shallow = append(shallow, strings.Fields(string(data))...)
		}
	}
	if w.depth > 0 {
		cut, err := w.depthBoundary(ctx, hash)
		if err != nil {
			return err
		}
		shallow = append(shallow, cut...)
	}
	file := filepath.Join(w.root, ".git", "shallow")
	if len(shallow) == 0 {
		if err := os.Remove(file); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	slices.Sort(shallow)
	return writeAtomic(file, []byte(strings.Join(slices.Compact(shallow), "\n")+"\n"))
}

// depthBoundary is the commits --depth-1 parents away from hash that have
// parents: git's own cut for a fetch of that depth, read from the first
// mirror that holds hash (root's own shallow file would cut the walk).
func (w *worktrees) depthBoundary(ctx context.Context, hash string) ([]string, error) {
	err := fmt.Errorf("no mirror holds %s", hash)
	for _, d := range w.mirrors.all() {
		var cut []string
		if cut, err = w.boundaryIn(ctx, d, hash); err == nil {
			return cut, nil
		}
	}
	return nil, err
}

// boundaryIn walks the mirror in dir from hash in topological order (every
// child before its parents, so a commit's distance is final when it is
// read) and stops when no commit nearer than the depth is left to read.
func (w *worktrees) boundaryIn(ctx context.Context, dir, hash string) ([]string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := w.git.command(ctx, w.root, "--git-dir="+dir, "rev-list", "--topo-order", "--parents", hash, "--")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	dist := map[string]int{hash: 1}
	pending := 1 // commits nearer than the depth not read yet
	var cut []string
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for pending > 0 && sc.Scan() {
		f := strings.Fields(sc.Text())
		d, ok := dist[f[0]]
		if !ok {
			continue // beyond the depth
		}
		pending--
		switch {
		case d == w.depth && len(f) > 1:
			cut = append(cut, f[0])
		case d < w.depth:
			for _, p := range f[1:] {
				if _, seen := dist[p]; !seen {
					dist[p] = d + 1
					pending++
				}
			}
		}
	}
	cancel()
	werr := cmd.Wait()
	if pending > 0 {
		return nil, fmt.Errorf("git rev-list %s: %v: %s", hash, werr, strings.TrimSpace(stderr.String()))
	}
	return cut, nil
}

// publish swaps the link to hash's worktree (a relative symlink, made
// under a temporary name and renamed over the link).
func (w *worktrees) publish(hash string) error {
	dir := filepath.Dir(w.link)
	if err := os.MkdirAll(dir, 0o775); err != nil {
		return fmt.Errorf("making the link's directory: %w", err)
	}
	target := w.worktreeFor(hash)
	if w.path != "" {
		target = filepath.Join(target, w.path)
	}
	rel, err := filepath.Rel(dir, target)
	if err != nil {
		return err
	}
	// A temporary name of its own: the link's directory may be anyone's
	// (an absolute --link), and nothing of theirs is removed or replaced.
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := filepath.Join(dir, "."+filepath.Base(w.link)+".tmp-"+hex.EncodeToString(rnd[:]))
	if err := os.Symlink(rel, tmp); err != nil {
		return fmt.Errorf("creating symlink: %w", err)
	}
	if err := os.Rename(tmp, w.link); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("replacing symlink: %w", err)
	}
	return nil
}

// retire starts the stale timer of the worktree the link left (its
// modification time), and removes one that is not a worktree of ours
// (git-sync v3's root/<hash>), as git-sync does.
func (w *worktrees) retire(old, hash string) {
	if old == "" || old == w.worktreeFor(hash) {
		return
	}
	if filepath.Dir(old) == filepath.Join(w.root, ".worktrees") {
		now := time.Now()
		_ = os.Chtimes(old, now, now)
		return
	}
	if filepath.Dir(old) == w.root && isHash(filepath.Base(old)) {
		_ = os.RemoveAll(old)
	}
}

// cleanup removes what is under root/.worktrees but the current worktree
// and those retired less than --stale-worktree-timeout ago, then has git
// forget them and collect garbage (--git-gc), in root and in the mirror,
// when it removed one or always is set (the first sync of a process,
// which may have another --depth than the last).
func (w *worktrees) cleanup(ctx context.Context, always bool) error {
	base := filepath.Join(w.root, ".worktrees")
	entries, err := os.ReadDir(base)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	removed := 0
	for _, e := range entries {
		if e.Name() == w.current {
			continue
		}
		info, err := e.Info()
		if err != nil || time.Since(info.ModTime()) <= w.stale && isHash(e.Name()) && e.IsDir() {
			continue
		}
		if err := os.RemoveAll(filepath.Join(base, e.Name())); err != nil {
			return err
		}
		removed++
	}
	if removed == 0 && !always {
		return nil
	}
	if _, err := w.git.run(ctx, w.root, "worktree", "prune"); err != nil {
		return err
	}
	if w.gc == "off" {
		return nil
	}
	if err := w.trimMirror(ctx); err != nil {
		return err
	}
	args := []string{"gc", "--quiet"}
	switch w.gc {
	case "auto":
		args = append(args, "--auto")
	case "aggressive":
		args = append(args, "--aggressive")
	}
	_, err = w.git.run(ctx, w.root, args...)
	return err
}

// trimmer is a mirror whose history can be cut to a depth and deepened
// again (gitutil's).
type trimmer interface {
	Trim(ctx context.Context, keep []gitutil.Hash, refs []string, depth int) (bool, error)
	Deepen(ctx context.Context, auth *gitutil.Auth, c gitutil.Hash, depth int) (bool, error)
}

// deepen fetches the history of hash --depth deep that the mirror lacks
// (a trim to a smaller depth, by the last process): git-sync's fetch of
// that depth.
func (w *worktrees) deepen(ctx context.Context, hash string) error {
	h, err := gitutil.ParseHash(hash)
	if err != nil {
		return err
	}
	for _, m := range w.mirrors.of(w.origin) {
		if t, ok := m.(trimmer); ok {
			if _, err := t.Deepen(ctx, w.auth, h, w.depth); err != nil {
				return err
			}
		}
	}
	return nil
}

// trimMirror makes the repository's mirror hold what git-sync's own
// repository would after its fetch of --depth and its garbage collection:
// the history of the worktrees under root and of the ref the target
// follows, that deep, and no other ref's. Not when another target reads
// the same mirror.
func (w *worktrees) trimMirror(ctx context.Context) error {
	if w.shared {
		return nil
	}
	var keep []gitutil.Hash
	entries, err := os.ReadDir(filepath.Join(w.root, ".worktrees"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, e := range entries {
		if h, err := gitutil.ParseHash(e.Name()); err == nil && e.IsDir() {
			keep = append(keep, h)
		}
	}
	var refs []string
	if w.ref != "" {
		refs = append(refs, w.ref)
	}
	for _, m := range w.mirrors.of(w.origin) {
		if pf, ok := m.(watcher.PathFetcher); ok && pf.Partial() {
			// A partial mirror (--filter, now or before) is not trimmed:
			// git's repack keeps every object of a promisor pack, as in
			// git-sync's repository with --filter.
			continue
		}
		if t, ok := m.(trimmer); ok {
			if _, err := t.Trim(ctx, keep, refs, w.depth); err != nil {
				return fmt.Errorf("trim the mirror: %w", err)
			}
		}
	}
	return nil
}

// gitRunner runs the git CLI on the root repository and its worktrees,
// with a global configuration of the command's own (GIT_CONFIG_GLOBAL,
// which git's own children, as the upload-pack of a file:// submodule,
// read too, where they drop -c settings): the user's global configuration
// included, then safe.directory=* (the volume is often another user's:
// git-sync sets the same) and --git-config's settings, as git-sync writes
// them to its global configuration. Its environment has none of the
// variables that would point git at another repository.
type gitRunner struct {
	bin    string
	global string // the configuration file; "" until configure
	// ssh is GIT_SSH_COMMAND, git-sync's (see config.sshCommand): the
	// keys and known hosts of submodules over SSH.
	ssh string
}

// configure writes the command's global configuration into dir (mode
// 0600: a setting may be a secret, as an http.extraHeader).
func (g *gitRunner) configure(ctx context.Context, dir string, configs []string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	file := filepath.Join(dir, ".gitconfig")
	user := []string{os.Getenv("GIT_CONFIG_GLOBAL")}
	if user[0] == "" {
		home, _ := os.UserHomeDir()
		user = []string{filepath.Join(cmp.Or(os.Getenv("XDG_CONFIG_HOME"), filepath.Join(home, ".config")), "git", "config"), filepath.Join(home, ".gitconfig")}
	}
	// Checkout in parallel (git's default is one worker): before the
	// user's configuration, which may say otherwise. The program's own
	// settings are written here, the user's by git, which quotes them.
	var b strings.Builder
	b.WriteString("[checkout]\n\tworkers = 0\n")
	for _, u := range user {
		if _, err := os.Stat(u); err == nil && u != file {
			fmt.Fprintf(&b, "[include]\n\tpath = %s\n", quoteConfig(u))
		}
	}
	b.WriteString("[safe]\n\tdirectory = *\n")
	// The program is git's credential helper, for the submodules.
	if self, err := os.Executable(); err == nil && !strings.ContainsAny(self, "'\n") {
		fmt.Fprintf(&b, "[credential]\n\thelper = %s\n", quoteConfig("!'"+self+"' "+credentialHelperArg))
	}
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		return err
	}
	for _, kv := range configs {
		k, v, _ := strings.Cut(kv, "=")
		if _, err := g.run(ctx, dir, "config", "--file", file, "--add", k, v); err != nil {
			return fmt.Errorf("--git-config %s: %w", k, err)
		}
	}
	g.global = file
	return nil
}

// quoteConfig is s as a quoted value of a git configuration file.
func quoteConfig(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\t", `\t`)
	return `"` + r.Replace(s) + `"`
}

func (g gitRunner) command(ctx context.Context, dir string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, g.bin, args...)
	cmd.Dir = dir
	cmd.WaitDelay = 5 * time.Second
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR",
			"GIT_CEILING_DIRECTORIES", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT":
			continue
		case "GIT_SSH_COMMAND":
			if g.ssh != "" {
				continue
			}
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env, "GIT_TERMINAL_PROMPT=0")
	if g.global != "" {
		cmd.Env = append(cmd.Env, "GIT_CONFIG_GLOBAL="+g.global)
	}
	if g.ssh != "" {
		cmd.Env = append(cmd.Env, "GIT_SSH_COMMAND="+g.ssh)
	}
	return cmd
}

// run runs git in dir and returns its output; its error quotes git's.
func (g gitRunner) run(ctx context.Context, dir string, args ...string) (string, error) {
	return g.runEnv(ctx, dir, nil, args...)
}

// runEnv is run with env added to git's environment.
func (g gitRunner) runEnv(ctx context.Context, dir string, env []string, args ...string) (string, error) {
	cmd := g.command(ctx, dir, args...)
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, io.Writer(&stderr)
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// mirrorDirs is the watcher's git, recording the directory of each mirror
// it opens, for the root repository to borrow their objects.
type mirrorDirs struct {
	watcher.Git
	// origin's mirrors fetch depth deep once shallow (git-sync's fetches).
	origin string
	depth  int
	filter string // --filter, of origin's mirrors
	// log hears when --git failed and go-git fetched instead.
	log logr.Logger
	// askpass, with --askpass-url, is asked at each listing of origin,
	// and origin's mirrors fetch with its answer.
	askpass *askpass
	// initial answers origin's listings that git-sync would not have made
	// at its first sync (nil: none).
	initial *initialSync

	mu   sync.Mutex
	dirs []string
	// mirrors holds the last mirror opened in each directory, with its
	// normalised URL.
	mirrors map[string]urlMirror
}

// gitReadMirror is the repository's mirror with --filter, whose reader is
// git: root's checkouts fetch the files they read from origin, the
// sparse ones only, so the watcher fetches none ahead of them (its own
// reads of the worktree's target are of commits and trees).
type gitReadMirror struct{ *mirror.Mirror }

// FetchPaths implements watcher.PathFetcher: nothing to fetch.
func (gitReadMirror) FetchPaths(context.Context, *gitutil.Auth, gitutil.Hash, []string) error {
	return nil
}

type urlMirror struct {
	url    string
	mirror watcher.Mirror
}

// isOrigin reports whether url is the repository's (--repo).
func (m *mirrorDirs) isOrigin(url string) bool {
	key, kerr := gitutil.NormalizeURL(url)
	origin, err := gitutil.NormalizeURL(m.origin)
	return err == nil && kerr == nil && key == origin
}

// ListRefs implements watcher.Git. With --askpass-url, a listing of the
// repository begins a sync attempt: it asks for the attempt's credentials
// first, and a failed call fails it. One git-sync would not have made
// at its first sync answers as the one before (see initialSync).
func (m *mirrorDirs) ListRefs(ctx context.Context, url string, auth *gitutil.Auth, prefixes []string) (gitutil.RefList, error) {
	if !m.isOrigin(url) {
		return m.Git.ListRefs(ctx, url, auth, prefixes)
	}
	list := func() (gitutil.RefList, error) {
		if m.askpass != nil {
			if err := m.askpass.refresh(ctx); err != nil {
				return gitutil.RefList{}, err
			}
			auth = m.askpass.auth(auth)
		}
		return m.Git.ListRefs(ctx, url, auth, prefixes)
	}
	if m.initial == nil {
		return list()
	}
	return m.initial.list(prefixes, list)
}

// OpenMirror implements watcher.Git.
func (m *mirrorDirs) OpenMirror(dir, url string, opts mirror.Options) (watcher.Mirror, error) {
	key, kerr := gitutil.NormalizeURL(url)
	opts.OnFallback = func(cli error) {
		m.log.Error(cli, "--git failed; go-git fetched instead", "repo", gitutil.RedactURL(url))
	}
	isOrigin := m.isOrigin(url)
	if isOrigin {
		opts.ShallowDepth, opts.Filter = m.depth, m.filter
	}
	opened, err := m.Git.OpenMirror(dir, url, opts)
	if err != nil {
		return nil, err
	}
	if gm, ok := opened.(*mirror.Mirror); ok && isOrigin && m.filter != "" {
		opened = gitReadMirror{gm}
	}
	if isOrigin && m.askpass != nil {
		if opened, err = m.askpass.asked(opened); err != nil {
			return nil, err
		}
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !slices.Contains(m.dirs, abs) {
		m.dirs = append(m.dirs, abs)
	}
	if kerr == nil {
		if m.mirrors == nil {
			m.mirrors = map[string]urlMirror{}
		}
		m.mirrors[abs] = urlMirror{key, opened}
	}
	return opened, nil
}

// of is the mirrors opened of url.
func (m *mirrorDirs) of(url string) []watcher.Mirror {
	key, err := gitutil.NormalizeURL(url)
	if err != nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []watcher.Mirror
	for _, um := range m.mirrors {
		if um.url == key {
			out = append(out, um.mirror)
		}
	}
	return out
}

func (m *mirrorDirs) all() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.dirs)
}

// writeAtomic writes data to file through a temporary file renamed over
// it, creating its directory.
func writeAtomic(file string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o775); err != nil {
		return err
	}
	tmp := file + ".tmp-gitsync"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

// isHash reports whether s is a full commit hash (a worktree's name).
func isHash(s string) bool {
	_, err := gitutil.ParseHash(s)
	return err == nil && len(s) == 40
}
