package mirror

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/internal/gitcli"
)

// firstFetch makes the first fetch into an empty mirror in one request
// where it can: a version 2 fetch of the listed objects (filtered for a
// partial mirror), the pack indexed by the git CLI's index-pack, which
// takes a large history in a fraction of go-git's time and memory. A git
// clone asks the server three times (its capabilities, its refs, the
// pack); the watcher listed the refs already. It needs a remote over
// HTTP(S) known to speak version 2 (a listing of this server succeeded),
// the git CLI, and the listed objects; done is false when it did not
// fetch (fetch as before). Callers hold m.mu.
func (m *Mirror) firstFetch(ctx context.Context, topts gitutil.Transport, listed map[string]plumbing.Hash, filter string) (done bool, err error) {
	e, err := gitutil.ParseURL(m.url)
	if err != nil || (e.Scheme != "http" && e.Scheme != "https") || m.opts.GitCLI == "" || len(listed) == 0 || !m.isEmpty() {
		return false, nil
	}
	if !m.lister.SpeaksV2(m.url) {
		return false, nil
	}
	var wants []plumbing.Hash
	for _, h := range listed {
		if h.IsZero() {
			return false, nil
		}
		wants = append(wants, h)
	}
	pack, closePack, err := m.v2Pack(ctx, topts, wants, nil, filter)
	if errors.Is(err, gitutil.ErrRateLimited) {
		return true, err // a host that limits is not asked again
	}
	if err != nil {
		return false, stopped(ctx) // the fetch that follows reports it
	}
	defer closePack()
	if err := m.indexPack(ctx, io.TeeReader(pack, progressWriter{&m.progress})); err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		m.fellBack(err)
		return false, m.reinit()
	}
	if err := m.reopen(); err != nil {
		return false, err
	}
	for name, h := range listed {
		if err := m.repo.Storer.SetReference(plumbing.NewHashReference(plumbing.ReferenceName(name), h)); err != nil {
			return false, err
		}
	}
	return true, nil
}

// stopped is ctx's error when it ended: a failure that is not a stop is
// left to the fetch that follows, which reports it.
func stopped(ctx context.Context) error { return ctx.Err() }

// indexPack stores the pack read from r into the mirror with git
// index-pack (completing a thin pack from the mirror), bounded by ctx and
// off the network. Callers hold m.mu.
func (m *Mirror) indexPack(ctx context.Context, r io.Reader) error {
	ctx, cancel := context.WithTimeout(ctx, defaultFetchTimeout)
	defer cancel()
	cmd := exec.Command(m.opts.GitCLI, "index-pack", "--stdin", "--fix-thin")
	cmd.Dir = m.dir
	cmd.Env = append(os.Environ(), "GIT_DIR="+m.dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull, "GIT_ALLOW_PROTOCOL=modwatch-none")
	cmd.Stdin = r
	var out gitcli.TailBuffer
	cmd.Stdout, cmd.Stderr = io.Discard, &out
	cmd.WaitDelay = 5 * time.Second
	if err := m.runGit(ctx, cmd); err != nil {
		return m.gitFailed("git index-pack", err, &out)
	}
	return nil
}
