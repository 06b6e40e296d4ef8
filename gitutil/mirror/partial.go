package mirror

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/config"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/sideband"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/internal/leftovers"
	"github.com/modwatch/modwatch/gitutil/internal/protov2"
	"github.com/modwatch/modwatch/internal/safefile"
)

// ErrNotFetched is returned (wrapped) by a read of a file that a partial
// mirror (see [Options.Partial]) does not hold and could not fetch
// from the remote when it was read: the remote's error, never damage.
var ErrNotFetched = errors.New("mirror: file not fetched into the partial mirror")

// Bounds of a partial mirror's fetches of files.
const (
	// cloneFilter is the filter of a partial mirror's first fetch: the
	// commits only, their history of trees being most of what a
	// repository of wide directories holds; the trees of a commit come
	// when it is read (all at once: a tree is fetched with those under
	// it).
	cloneFilter = "tree:0"
	// fetchFilter is the filter of its later fetches: commits and trees,
	// no file.
	fetchFilter = "blob:none"
	// maxWantsPerFetch bounds the objects one fetch of files names (a
	// request of 50 bytes each).
	maxWantsPerFetch = 20_000
	// maxPathBlobs bounds the files FetchPaths brings for one call: a tree
	// is hostile input.
	maxPathBlobs = 1 << 20
	// maxCompleteTrees bounds the trees a mirror remembers as complete.
	maxCompleteTrees = 1 << 16
	// lazyFetchTimeout bounds the fetch of a file that a reader of a file
	// system asked for and the mirror lacked.
	lazyFetchTimeout = time.Minute
)

// promisorKey is the git configuration that makes a mirror partial, as
// git's own partial clones say it: remote.origin.promisor, with the filter
// in remote.origin.partialclonefilter. git (which repacks the mirror)
// takes the files it lacks for promised by the remote.
const promisorSection, promisorRemote = "remote", "origin"

// partialCapable reports whether this fetch may be filtered: a mirror that
// is partial already, or an empty one that may become partial. Only over
// HTTP(S), with the git CLI (go-git cannot repack a mirror that lacks
// files), and with full history. Callers hold m.mu.
func (m *Mirror) partialCapable() bool {
	e, err := gitutil.ParseURL(m.url)
	if err != nil || (e.Scheme != "http" && e.Scheme != "https") || m.opts.GitCLI == "" || m.opts.FirstFetchDepth > 0 {
		return false
	}
	return m.partial || (m.opts.Partial && m.isEmpty())
}

// readPartial reads whether the mirror on disk is partial. Callers hold
// m.mu or own m.
func (m *Mirror) readPartial() bool {
	cfg, err := m.repo.Config()
	if err != nil {
		return false
	}
	return cfg.Raw.Section(promisorSection).Subsection(promisorRemote).Option("promisor") == "true"
}

// maxConfigFile bounds the mirror's configuration file read: a remote or
// two, a few hundred bytes.
const maxConfigFile = 1 << 20

// markPartial records that the mirror is partial, in its configuration
// file as git has it (go-git's own configuration keeps only the remotes it
// knows of). Callers hold m.mu.
func (m *Mirror) markPartial() error {
	path := filepath.Join(m.dir, "config")
	data, err := safefile.ReadFile(context.Background(), path, maxConfigFile, safefile.NoFollow)
	if err != nil {
		return err
	}
	cfg := config.New()
	if err := config.NewDecoder(bytes.NewReader(data)).Decode(cfg); err != nil {
		return err
	}
	sub := cfg.Section(promisorSection).Subsection(promisorRemote)
	sub.SetOption("url", m.url)
	sub.SetOption("promisor", "true")
	sub.SetOption("partialclonefilter", m.partialFilter())
	var out bytes.Buffer
	if err := config.NewEncoder(&out).Encode(cfg); err != nil {
		return err
	}
	if err := writeFileAtomic(path, out.Bytes()); err != nil {
		return err
	}
	m.partial = true
	return nil
}

// writeFileAtomic replaces path with data: a crash leaves the old file or
// the new one.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// markPromisorPacks marks every pack of the mirror in dir as fetched from
// a promisor remote, as git marks those of a partial clone: git, which
// repacks the mirror, then takes the files their trees name and the
// mirror lacks for promised, and does not try to read them.
func markPromisorPacks(dir string) error {
	packDir := filepath.Join(dir, "objects", "pack")
	for name := range packNames(dir) {
		p := filepath.Join(packDir, name+".promisor")
		if _, err := os.Stat(p); err == nil {
			continue
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Partial reports whether the mirror is partial: it holds the commits of
// the refs it fetched, and only the trees and files that were asked for
// or read.
func (m *Mirror) Partial() bool {
	m.mu.Lock()
	defer m.unlock()
	return m.partial
}

// fetchFiltered fetches the listed objects without their files, when the
// server allows filters; taken reports whether it did (false: fetch as a
// full mirror does). Callers hold m.mu.
func (m *Mirror) fetchFiltered(ctx context.Context, topts gitutil.Transport, listed map[string]plumbing.Hash) (fetched, taken bool, err error) {
	var wants []plumbing.Hash
	for _, h := range listed {
		if h.IsZero() {
			return false, false, nil
		}
		if m.repo.Storer.HasEncodedObject(h) != nil && !slices.Contains(wants, h) {
			wants = append(wants, h)
		}
	}
	if len(wants) > 0 {
		ok, err := m.filterAllowed(ctx, topts)
		if err != nil || !ok {
			return false, false, err
		}
		var haves []plumbing.Hash
		if m.isEmpty() {
			// Marked first: a crash after the pack is stored must not leave
			// a mirror that lacks files and says it is full.
			if err := m.markPartial(); err != nil {
				return false, false, err
			}
		} else {
			haves = m.refTips()
		}
		if err := m.fetchV2(ctx, topts, wants, haves, fetchFilter); err != nil {
			return false, true, err
		}
		fetched = true
	}
	for name, h := range listed {
		if err := m.repo.Storer.SetReference(plumbing.NewHashReference(plumbing.ReferenceName(name), h)); err != nil {
			return fetched, true, err
		}
	}
	return fetched, true, nil
}

// partialClone makes the first fetch into an empty mirror that may be
// partial, when the remote allows filters: one version 2 fetch of the
// listed commits (see firstFetch), or else the git CLI's partial clone
// (git's index-pack takes a long history in a fraction of go-git's time
// and memory); the listed refs the clone lacks are fetched filtered after
// it. cloned is false when it did not fetch (a mirror that is not empty, a
// remote without filters, a clone that failed: fetch as before); err is a
// stop only. Callers hold m.mu.
func (m *Mirror) partialClone(ctx context.Context, topts gitutil.Transport, refs []string, listed map[string]plumbing.Hash) (cloned bool, err error) {
	if !m.isEmpty() {
		return false, nil
	}
	if ok, err := m.filterAllowed(ctx, topts); err != nil || !ok {
		return false, nil
	}
	if err := m.markPartial(); err != nil {
		return false, err
	}
	if done, err := m.firstFetch(ctx, topts, listed, cloneFilter); err != nil {
		return false, err
	} else if done {
		if err := markPromisorPacks(m.dir); err != nil {
			return true, err
		}
		_, _, err = m.fetchFiltered(ctx, topts, listed)
		return true, err
	}
	e, err := gitutil.ParseURL(m.url)
	if err != nil {
		return false, nil
	}
	if err := m.cliClone(ctx, e, topts, refs, cloneFilter); err != nil {
		if final(ctx, err) {
			return false, err
		}
		m.fellBack(err)
		return false, m.reinit()
	}
	// git says the clone is partial in its configuration (as markPartial
	// does), a server that ignored the filter too.
	m.partial = m.readPartial()
	_, _, err = m.fetchFiltered(ctx, topts, listed)
	return true, err
}

// fetchPartial is the fetch of a mirror that is or may become partial: its
// first one (partialClone), or a filtered one. done is false when it did
// not fetch: a remote that does not allow filters, or a filtered fetch
// that failed, is fetched as a full mirror is (a partial mirror gets the
// files of the new commits with them). Callers hold m.mu.
func (m *Mirror) fetchPartial(ctx context.Context, topts gitutil.Transport, refs []string, listed map[string]plumbing.Hash) (fetched, done bool, err error) {
	if cloned, err := m.partialClone(ctx, topts, refs, listed); cloned || err != nil {
		return cloned, true, err
	}
	fetched, taken, err := m.fetchFiltered(ctx, topts, listed)
	if taken && (err == nil || ctx.Err() != nil) {
		return fetched, true, err
	}
	return false, false, nil
}

// refTips are the objects the mirror's refs point at, once each: what a
// fetch tells the server the mirror has.
func (m *Mirror) refTips() []plumbing.Hash {
	var out []plumbing.Hash
	refs, err := m.repo.References()
	if err != nil {
		return nil
	}
	_ = refs.ForEach(func(r *plumbing.Reference) error {
		if r.Type() == plumbing.HashReference && !slices.Contains(out, r.Hash()) {
			out = append(out, r.Hash())
		}
		return nil
	})
	return out
}

// filterAllowed reports whether the remote speaks version 2 and its fetch
// takes a filter, asking its server once (see gitutil.Lister.AllowsFilter).
func (m *Mirror) filterAllowed(ctx context.Context, topts gitutil.Transport) (bool, error) {
	return m.lister.AllowsFilter(ctx, m.url, topts)
}

// fetchV2 sends one version 2 fetch command and stores the pack it
// answers with. Callers hold m.mu.
func (m *Mirror) fetchV2(ctx context.Context, topts gitutil.Transport, wants, haves []plumbing.Hash, filter string) error {
	pack, done, err := m.v2Pack(ctx, topts, wants, haves, filter)
	if err != nil {
		return err
	}
	defer done()
	return m.storeThinPack(pack)
}

// v2Pack sends one version 2 fetch command (see protov2.FetchRequest)
// and returns the pack it answers with, its side band taken off (the
// server's progress counted), and what to call when it is read.
func (m *Mirror) v2Pack(ctx context.Context, topts gitutil.Transport, wants, haves []plumbing.Hash, filter string) (io.Reader, func(), error) {
	m.sent.Add(1)
	body, err := m.lister.UploadPack(ctx, m.url, topts, protov2.FetchRequest(wants, haves, filter))
	if err != nil {
		return nil, nil, err
	}
	done := func() { _ = body.Close() }
	if err := protov2.ReadToPackfile(body); err != nil {
		done()
		return nil, nil, err
	}
	d := sideband.NewDemuxer(sideband.Sideband64k, body)
	d.Progress = progressWriter{&m.progress}
	return d, done, nil
}

// FetchPaths brings into a partial mirror the files under paths (relative
// to the repository's root; "" is all of it) at commit, and the root's
// .gitmodules, that it lacks, in as few requests as it can. A full mirror
// has them all: it does nothing. Reading a file a partial mirror lacks
// fetches that one file then (see [Options.Partial]); FetchPaths
// fetches a target's files at once, before they are read.
func (m *Mirror) FetchPaths(ctx context.Context, auth *gitutil.Auth, c gitutil.Hash, paths []string) error {
	if !m.Partial() {
		return nil
	}
	ctx, cancel, topts, err := m.prepare(ctx, auth)
	if err != nil {
		return err
	}
	defer cancel()
	defer m.lockToWrite()()
	if !m.partial {
		return nil
	}
	m.lastAuth = auth
	missing, walked, err := m.missingBlobs(ctx, plumbing.Hash(c), paths)
	if err != nil {
		return err
	}
	if err := m.fetchObjects(ctx, topts, missing); err != nil {
		return &gitutil.RemoteError{Op: "fetch files", URL: m.url, Err: err}
	}
	if len(m.complete)+len(walked) > maxCompleteTrees {
		clear(m.complete)
	}
	if m.complete == nil {
		m.complete = map[plumbing.Hash]bool{}
	}
	for _, h := range walked {
		m.complete[h] = true
	}
	return nil
}

// missingBlobs lists the files under paths at commit, and the root's
// .gitmodules, that the mirror lacks, and the trees it walked for them.
// A tree whose files were all there once (m.complete) is not walked again:
// a new commit costs the directories it changed. Callers hold m.mu.
func (m *Mirror) missingBlobs(ctx context.Context, commit plumbing.Hash, paths []string) (missing, walked []plumbing.Hash, err error) {
	w := &blobWalk{m: m, ctx: ctx, seen: map[plumbing.Hash]bool{}}
	if e, err := m.entryAt(commit, ".gitmodules"); err == nil && e.Mode.IsFile() {
		if err := w.add(e.Hash); err != nil {
			return nil, nil, err
		}
	}
	for _, p := range paths {
		e, err := m.entryAt(commit, p)
		if errors.Is(err, ErrPathNotFound) {
			continue // the selection says so, with its own error
		}
		if err == nil {
			err = w.entry(e.Mode, e.Hash)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("mirror: files under %q at %s: %w", p, commit, err)
		}
	}
	return w.missing, w.walked, nil
}

// blobWalk collects the files under trees that a mirror lacks, within
// maxPathBlobs; callers hold m.mu.
type blobWalk struct {
	m               *Mirror
	ctx             context.Context
	seen            map[plumbing.Hash]bool
	missing, walked []plumbing.Hash
}

// entry takes a tree entry: a directory is walked, a submodule left out.
func (w *blobWalk) entry(mode filemode.FileMode, h plumbing.Hash) error {
	switch mode {
	case filemode.Dir:
		return w.tree(h)
	case filemode.Submodule:
		return nil
	}
	return w.add(h)
}

func (w *blobWalk) tree(h plumbing.Hash) error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	if w.m.complete[h] || w.seen[h] {
		return nil
	}
	w.seen[h] = true
	w.walked = append(w.walked, h)
	t, err := w.m.tree(h)
	if err != nil {
		return err
	}
	for _, e := range t.Entries {
		if err := w.entry(e.Mode, e.Hash); err != nil {
			return err
		}
	}
	return nil
}

func (w *blobWalk) add(h plumbing.Hash) error {
	if w.seen[h] {
		return nil
	}
	if len(w.seen) >= maxPathBlobs {
		return fmt.Errorf("more than %d files", maxPathBlobs)
	}
	w.seen[h] = true
	if w.m.repo.Storer.HasEncodedObject(h) != nil {
		w.missing = append(w.missing, h)
	}
	return nil
}

// fetchObjects asks the remote for the objects by name, in requests of at
// most maxWantsPerFetch, telling it of nothing the mirror has (it would
// leave out what those reach), and checks that each came. The filter
// leaves out the files under a tree asked for, not a file asked for by
// name. Callers hold m.mu.
func (m *Mirror) fetchObjects(ctx context.Context, topts gitutil.Transport, wants []plumbing.Hash) error {
	for len(wants) > 0 {
		n := min(len(wants), maxWantsPerFetch)
		if err := m.fetchV2(ctx, topts, wants[:n], nil, fetchFilter); err != nil {
			return err
		}
		for _, h := range wants[:n] {
			if m.repo.Storer.HasEncodedObject(h) != nil {
				return fmt.Errorf("the remote did not send %s", h)
			}
		}
		wants = wants[n:]
	}
	return nil
}

// lazyObject is called with err, the read of object h that the mirror
// lacks: a partial mirror fetches it (a tree with the trees under it, not
// their files) with the credentials of its last fetch and returns nil
// (read again); a full mirror returns err, damage. A fetch that fails is
// ErrNotFetched. Callers hold m.mu.
func (m *Mirror) lazyObject(h plumbing.Hash, err error) error {
	if !m.partial || m.lazying || !errors.Is(err, plumbing.ErrObjectNotFound) {
		return err
	}
	m.lazying = true
	defer func() { m.lazying = false }()
	// A read's fetch, apart from the operations that take lockToWrite.
	defer leftovers.Note(m.dir).Clear(m.dir)
	ctx, cancel, topts, perr := m.prepare(context.Background(), m.lastAuth)
	if perr != nil {
		return fmt.Errorf("%w: %s: %v", ErrNotFetched, h, perr)
	}
	defer cancel()
	ctx, cancelLazy := context.WithTimeout(ctx, lazyFetchTimeout)
	defer cancelLazy()
	if ferr := m.fetchObjects(ctx, topts, []plumbing.Hash{h}); ferr != nil {
		return fmt.Errorf("%w: %s: %v", ErrNotFetched, h, ferr)
	}
	return nil
}

// fetched is called with err, a treeFS's read of object h that failed: in
// a partial mirror that lacks h, it fetches h, lets the file system see
// it, and returns nil (read again); otherwise it returns the error to
// report. The caller holds f.mu.
func (f *treeFS) fetched(h plumbing.Hash, err error) error {
	if !errors.Is(err, plumbing.ErrObjectNotFound) {
		return err
	}
	m := f.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if f.gen != m.gen.Load() || f.released.Load() {
		return err
	}
	if lerr := m.lazyObject(h, err); lerr != nil {
		return lerr
	}
	if _, rerr := f.st.Refresh(); rerr != nil {
		return rerr
	}
	m.addReader(f, f.st)
	return nil
}
