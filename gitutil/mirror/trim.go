package mirror

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/internal/gitcli"
)

// maxTrimWalk bounds the commits Trim reads to find the depth's boundary:
// a merge-heavy history is hostile input too.
const maxTrimWalk = 1 << 20

// Trim drops what a clone of keep and refs, depth commits deep, would not
// hold.
//
// Depth 0 is their whole history. The mirror then holds what git-sync's
// repository does after a fetch of that depth and a garbage collection:
// its refs but those of refs and those that lead to a commit of keep are
// deleted (a commit of keep that no ref leads to gets one; a ref of refs
// the mirror lacks is no error: a branch a target follows, which a fetch
// may move past what keep holds, is named there), the commits at the depth
// become its shallow boundary (git's shallow file: their parents are not part of
// its history), and a repack keeps only what the refs reach within it.
// When nothing is to be dropped it changes nothing; it reports whether it
// changed the mirror. It first deletes the packs an earlier repack
// replaced that no file system reads any more.
//
// A later fetch of another ref brings that ref's history again, and
// ancestry beyond the boundary is [ErrHistoryIncomplete], as in a mirror
// whose first fetch was shallow. What it drops is deleted at once, as by
// git gc --prune=now (git reads every pack on disk, and would find
// commits whose parents are gone): a file system handed out before a trim
// that changed the mirror fails its later reads with [ErrRebuilt], as
// after a rebuild. It needs GitCLI, and a mirror that is not partial.
func (m *Mirror) Trim(ctx context.Context, keep []gitutil.Hash, refs []string, depth int) (bool, error) {
	if m.opts.GitCLI == "" {
		return false, errors.New("mirror: trim needs the git CLI")
	}
	if depth < 0 {
		return false, fmt.Errorf("mirror: trim: negative depth %d", depth)
	}
	defer m.lockToWrite()()
	if m.broken != nil {
		return false, fmt.Errorf("%w: %w", ErrCorrupt, m.broken)
	}
	if m.partial {
		// git's repack keeps every object of a promisor pack, reachable
		// or not: a trim would drop nothing.
		return false, errors.New("mirror: trim of a partial mirror")
	}
	m.dropReplaced()
	tips := make([]plumbing.Hash, 0, len(keep))
	for _, k := range keep {
		if _, err := m.commit(plumbing.Hash(k)); err != nil {
			return false, err
		}
		tips = append(tips, plumbing.Hash(k))
	}
	drop, add, kept, err := m.trimRefs(tips, refs)
	if err != nil {
		return false, err
	}
	for _, c := range kept {
		if !slices.Contains(tips, c) {
			tips = append(tips, c)
		}
	}
	old, err := m.repo.Storer.Shallow()
	if err != nil {
		return false, err
	}
	shallow := old
	if depth > 0 {
		if shallow, _, err = m.boundary(ctx, tips, depth, old); err != nil {
			return false, err
		}
	}
	if len(drop) == 0 && len(add) == 0 && sameSet(shallow, old) {
		return false, nil
	}
	return true, m.applyTrim(ctx, drop, add, shallow)
}

// trimRefs is what Trim does to the refs: those not in keep that lead
// elsewhere than to tips, to delete, the tips no ref leads to, to name, and
// the commits the refs of keep lead to.
func (m *Mirror) trimRefs(tips []plumbing.Hash, keep []string) (drop []plumbing.ReferenceName, add, kept []plumbing.Hash, err error) {
	iter, err := m.repo.References()
	if err != nil {
		return nil, nil, nil, m.markCorrupt(err)
	}
	named := map[plumbing.Hash]bool{}
	err = iter.ForEach(func(r *plumbing.Reference) error {
		if r.Type() != plumbing.HashReference {
			return nil
		}
		c, err := m.refCommit(r.Name().String())
		if err == nil && slices.Contains(keep, r.Name().String()) {
			kept = append(kept, c)
			named[c] = true
			return nil
		}
		if err == nil && slices.Contains(tips, c) {
			named[c] = true
			return nil
		}
		drop = append(drop, r.Name())
		return nil
	})
	iter.Close()
	if err != nil {
		return nil, nil, nil, err
	}
	for _, t := range tips {
		if !named[t] && !slices.Contains(add, t) {
			add = append(add, t)
		}
	}
	return drop, add, kept, nil
}

// boundary is the shallow boundary of a clone of tips depth deep: the
// commits depth-1 parents away from a tip (the nearest way) that have
// parents, and those nearer that the mirror's shallow file old cuts
// already (short is set when there is one: the mirror holds less than the
// depth). It walks breadth first, so that a commit's distance is the
// shortest, as git's own deepening counts it.
func (m *Mirror) boundary(ctx context.Context, tips []plumbing.Hash, depth int, old []plumbing.Hash) (cut []plumbing.Hash, short bool, err error) {
	dist := map[plumbing.Hash]int{}
	queue := slices.Clone(tips)
	for _, t := range tips {
		dist[t] = 1
	}
	for len(queue) > 0 {
		if len(dist) > maxTrimWalk {
			return nil, false, fmt.Errorf("mirror: more than %d commits within depth %d", maxTrimWalk, depth)
		}
		if err := ctx.Err(); err != nil {
			return nil, false, err
		}
		h := queue[0]
		queue = queue[1:]
		c, err := m.commit(h)
		if err != nil {
			return nil, false, err
		}
		if len(c.ParentHashes) == 0 {
			continue
		}
		if dist[h] == depth || slices.Contains(old, h) {
			short = short || dist[h] < depth
			cut = append(cut, h)
			continue
		}
		for _, p := range c.ParentHashes {
			if _, seen := dist[p]; !seen {
				dist[p] = dist[h] + 1
				queue = append(queue, p)
			}
		}
	}
	return cut, short, nil
}

// Deepen fetches the history of commit, depth commits deep, that the
// mirror lacks.
//
// Depth 0 is all of it. The git CLI fetches (git fetch --depth, or
// --unshallow) under a ref of the commit's own: after a [Mirror.Trim] to
// a shallower depth, or a shallow first fetch. It fetches
// the commit too when the mirror lacks it (git asks for it by hash, which
// a server answers over protocol version 2, or with
// uploadpack.allowReachableSHA1InWant). It fetches nothing when the mirror
// holds that much; it reports whether it fetched.
func (m *Mirror) Deepen(ctx context.Context, auth *gitutil.Auth, c gitutil.Hash, depth int) (bool, error) {
	if m.opts.GitCLI == "" {
		return false, errors.New("mirror: deepen needs the git CLI")
	}
	if depth < 0 {
		return false, fmt.Errorf("mirror: deepen: negative depth %d", depth)
	}
	ctx, cancel, topts, err := m.prepare(ctx, auth)
	if err != nil {
		return false, err
	}
	defer cancel()
	defer m.lockToWrite()()
	if m.broken != nil {
		return false, fmt.Errorf("%w: %w", ErrCorrupt, m.broken)
	}
	h := plumbing.Hash(c)
	if short, err := m.short(ctx, h, depth); err != nil || !short {
		return false, err
	}
	extra := []string{"--unshallow"}
	if depth > 0 {
		extra = []string{fmt.Sprintf("--depth=%d", depth)}
	} else if old, _ := m.repo.Storer.Shallow(); len(old) == 0 {
		extra = nil // the commit only, with its whole history
	}
	if err := m.cliFetch(ctx, topts, extra, "+"+h.String()+":refs/modwatch/commits/"+h.String()); err != nil {
		return false, &gitutil.RemoteError{Op: "deepen " + h.String(), URL: m.url, Err: err}
	}
	if _, err := m.commit(h); err != nil {
		return false, err
	}
	return true, nil
}

// short reports whether the mirror lacks commit, or some of its history
// depth deep (0: any of it). Callers hold m.mu.
func (m *Mirror) short(ctx context.Context, h plumbing.Hash, depth int) (bool, error) {
	if m.repo.Storer.HasEncodedObject(h) != nil {
		return true, nil
	}
	old, err := m.repo.Storer.Shallow()
	if err != nil || len(old) == 0 || depth == 0 {
		// Depth 0 of a shallow mirror: unshallowed once, without walking
		// all its history.
		return len(old) > 0, err
	}
	_, short, err := m.boundary(ctx, []plumbing.Hash{h}, depth, old)
	return short, err
}

// sameSet reports whether a and b hold the same hashes.
func sameSet(a, b []plumbing.Hash) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	cmp := func(x, y plumbing.Hash) int { return strings.Compare(x.String(), y.String()) }
	slices.SortFunc(a, cmp)
	slices.SortFunc(b, cmp)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

// applyTrim names the tips in add, writes the shallow boundary, deletes
// the refs in drop and repacks what is left reachable. A failure leaves a
// mirror that holds at least what the refs reach. Callers hold m.mu.
func (m *Mirror) applyTrim(ctx context.Context, drop []plumbing.ReferenceName, add, shallow []plumbing.Hash) error {
	for _, h := range add {
		ref := plumbing.NewHashReference(plumbing.ReferenceName("refs/modwatch/commits/"+h.String()), h)
		if err := m.repo.Storer.SetReference(ref); err != nil {
			return err
		}
	}
	if err := m.repo.Storer.SetShallow(shallow); err != nil {
		return err
	}
	for _, name := range drop {
		var err error
		if name == plumbing.HEAD {
			// A detached HEAD (a clone of a tag) becomes what an empty
			// mirror has: git needs a HEAD to take the directory for a
			// repository.
			err = m.repo.Storer.SetReference(plumbing.NewSymbolicReference(plumbing.HEAD, plumbing.Master))
		} else {
			err = m.repo.Storer.RemoveReference(name)
		}
		if err != nil {
			return err
		}
	}
	// No reflog (a git that was told to write one, as with
	// core.logAllRefUpdates set globally, may have): the repack would keep
	// what it names, the commit a branch left among them, without its
	// parents and no longer shallow, where git's walks stop.
	if err := os.RemoveAll(filepath.Join(m.dir, "logs")); err != nil {
		return err
	}
	if _, err := m.repackReplacing(ctx, nil); err != nil {
		return fmt.Errorf("trim: %w", err)
	}
	// Loose objects: those now packed, and those nothing reaches.
	if err := m.runMaintenance(ctx, "prune", "--expire=now"); err != nil {
		return fmt.Errorf("trim: %w", err)
	}
	m.repacks.Add(1)
	// What was dropped goes now, for git too (which reads every pack
	// there is: a commit of a pack kept for a reader, its parents gone
	// and the shallow file no longer naming it, would stop git's walks),
	// and file systems handed out stop reading, as after a rebuild.
	m.gen.Add(1)
	packDir := filepath.Join(m.dir, "objects", "pack")
	for p := range m.replaced {
		removePack(packDir, p)
		m.indexes.Forget(p)
		delete(m.replaced, p)
	}
	m.recordReplaced()
	return m.reopen()
}

// runMaintenance runs a git command on the mirror that needs no network
// (a repack, a prune), bounded by ctx and 10 minutes. No protocol is
// allowed: git would fetch what a partial mirror lacks (without
// credentials, but all of it) rather than fail; nor any configuration
// but the mirror's own.
func (m *Mirror) runMaintenance(ctx context.Context, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.Command(m.opts.GitCLI, append([]string{"-C", m.dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull, "GIT_ALLOW_PROTOCOL=modwatch-none")
	cmd.WaitDelay = 5 * time.Second
	var out gitcli.TailBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := m.runGit(ctx, cmd); err != nil {
		return fmt.Errorf("git %s: %w: %s", args[0], err, strings.TrimSpace(out.String()))
	}
	return nil
}

// shallow reports whether the mirror's history is cut (git's shallow
// file). Callers hold m.mu.
func (m *Mirror) shallow() bool {
	old, err := m.repo.Storer.Shallow()
	return err == nil && len(old) > 0
}

// fetchCLIShallow fetches refs with the git CLI at ShallowDepth, when it is
// set, into a mirror that is shallow or empty; done is false when the
// fetch is go-git's (no ShallowDepth, a full mirror, or an empty one whose
// shallow first fetch failed). Callers hold m.mu.
func (m *Mirror) fetchCLIShallow(ctx context.Context, topts gitutil.Transport, refs []string) (fetched, done bool, err error) {
	if m.opts.GitCLI == "" {
		return false, false, nil
	}
	if m.opts.ShallowDepth > 0 && m.isEmpty() {
		fetched, err := m.fetchShallow(ctx, topts, refs)
		if err == nil || final(ctx, err) {
			return fetched, true, err
		}
		// On failure, go-git fetches (in full) into the empty mirror again.
		m.fellBack(err)
		if rerr := m.reinit(); rerr != nil {
			return false, true, rerr
		}
		return false, false, nil
	}
	if m.opts.ShallowDepth > 0 && m.shallow() {
		fetched, err := m.fetchShallow(ctx, topts, refs)
		return fetched, true, err
	}
	return false, false, nil
}

// fetchShallow fetches refs into a shallow mirror with the git CLI, at
// ShallowDepth (with go-git, at that depth, should the CLI fail); it
// reports whether a ref moved. Callers hold m.mu.
func (m *Mirror) fetchShallow(ctx context.Context, topts gitutil.Transport, refs []string) (bool, error) {
	gspecs, specs, err := cliRefSpecs(refs)
	if err != nil {
		return false, err
	}
	before := m.refHashes(refs)
	var extra []string
	if m.opts.ShallowDepth > 0 {
		extra = []string{fmt.Sprintf("--depth=%d", m.opts.ShallowDepth)}
	}
	err = m.cliFetch(ctx, topts, extra, specs...)
	if err != nil && !final(ctx, err) && m.opts.ShallowDepth > 0 && !m.isEmpty() {
		// go-git tells the server where the mirror's history ends when it
		// fetches to a depth: it stands in for a git CLI that failed.
		m.fellBack(err)
		_, err = m.goGitFetch(ctx, topts, gspecs, m.opts.ShallowDepth)
	}
	if err != nil {
		return false, err
	}
	return m.moved(refs, before), nil
}

// cliRefSpecs are refSpecs, and the same as the git CLI's arguments.
func cliRefSpecs(refs []string) ([]config.RefSpec, []string, error) {
	gspecs, err := refSpecs(refs)
	if err != nil {
		return nil, nil, err
	}
	specs := make([]string, 0, len(gspecs))
	for _, s := range gspecs {
		specs = append(specs, s.String())
	}
	return gspecs, specs, nil
}

// refHashes is what each of refs the mirror has points at. Callers hold
// m.mu.
func (m *Mirror) refHashes(refs []string) map[string]plumbing.Hash {
	at := map[string]plumbing.Hash{}
	for _, r := range refs {
		if ref, err := m.repo.Storer.Reference(plumbing.ReferenceName(r)); err == nil {
			at[r] = ref.Hash()
		}
	}
	return at
}

// moved reports whether a ref of refs points elsewhere than it did in
// before (refHashes). Callers hold m.mu.
func (m *Mirror) moved(refs []string, before map[string]plumbing.Hash) bool {
	after := m.refHashes(refs)
	for _, r := range refs {
		if h, ok := after[r]; !ok || h != before[r] {
			return true
		}
	}
	return false
}
