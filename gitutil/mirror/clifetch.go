package mirror

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/internal/gitcli"
	"github.com/modwatch/modwatch/gitutil/internal/leftovers"
	"github.com/modwatch/modwatch/internal/procgroup"
)

// cliClone replaces the empty mirror with a bare clone of the first
// branch or tag in refs made by the git CLI; the caller then fetches every
// ref with go-git, which transfers little since the history is there. It
// is used for the first fetch only: go-git's full first fetch of a large
// repository takes several times the CLI's time and memory, while its
// incremental fetches are as cheap. A clone, not a fetch into the empty
// repository: git fetch runs a connectivity check over all history that
// costs about 8 times clone's memory. Credentials reach git through the
// environment and private temporary files, never its command line.
func (m *Mirror) cliClone(ctx context.Context, e gitutil.Endpoint, t gitutil.Transport, refs []string, filter string) error {
	m.sent.Add(3)
	branch, err := gitcli.CloneBranch(refs)
	if err != nil {
		return err
	}
	env, done, err := gitcli.Env(m.opts.TempDir, e, t)
	if err != nil {
		return err
	}
	defer done()
	clone := m.dir + ".clone"
	if err := os.RemoveAll(clone); err != nil {
		return err
	}
	defer os.RemoveAll(clone)
	if err := m.runCLIClone(ctx, env, branch, clone, filter); err != nil {
		return err
	}
	if err := os.RemoveAll(m.dir); err != nil {
		return err
	}
	if err := os.Rename(clone, m.dir); err != nil {
		return err
	}
	repo, err := m.openRepo()
	if err != nil {
		return err
	}
	m.repo = repo
	return nil
}

// runCLIClone runs git clone --bare of branch into clone with env, with
// filter (a partial clone) unless it is "".
func (m *Mirror) runCLIClone(ctx context.Context, env []string, branch, clone, filter string) error {
	// --progress: its messages, counted, tell a slow clone from a stalled
	// one (see Progress).
	args := []string{"clone", "--progress", "--bare", "--no-tags", "--single-branch", "--branch=" + branch}
	if filter != "" {
		args = append(args, "--filter="+filter)
	}
	args = append(args, "--", m.url, clone)
	cmd := exec.Command(m.opts.GitCLI, args...)
	cmd.Env = env
	cmd.WaitDelay = 5 * time.Second
	var out gitcli.TailBuffer
	cmd.Stderr = io.MultiWriter(&out, progressWriter{&m.progress}) // clone writes nothing to stdout
	if err := procgroup.Run(ctx, cmd); err != nil {
		return m.gitFailed("git clone", err, &out)
	}
	return nil
}

// gitFailed is the error of a git command that failed: the last KiB of
// what it wrote, without the mirror's URL's secrets.
//
// git says a 429 ("The requested URL returned error: 429") but not its
// headers: it is a rate limit of [gitutil.DefaultRateLimitWait], as a 429
// without them is (a 503 without them is an outage).
func (m *Mirror) gitFailed(what string, err error, out *gitcli.TailBuffer) error {
	msg := strings.TrimSpace(out.String())
	if len(msg) > 1024 {
		msg = msg[len(msg)-1024:]
	}
	if strings.Contains(msg, fmt.Sprintf("returned error: %d", http.StatusTooManyRequests)) {
		rl := &gitutil.RateLimitError{Host: m.host, Code: http.StatusTooManyRequests, Until: time.Now().Add(gitutil.DefaultRateLimitWait)}
		m.lister.NoteLimit(rl)
		return fmt.Errorf("%s: %w: %s", what, rl, scrub(msg, m.url))
	}
	return fmt.Errorf("%s: %w: %s", what, err, scrub(msg, m.url))
}

// final reports whether a fetch's failure ends it: ctx ended, or the host
// limits the client, and is not asked again another way.
func final(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, gitutil.ErrRateLimited)
}

// scrub removes the raw URL (which may carry credentials) from a message
// produced by a lower layer.
func scrub(msg, rawURL string) string {
	if rawURL != "" && rawURL != gitutil.RedactURL(rawURL) {
		msg = strings.ReplaceAll(msg, rawURL, gitutil.RedactURL(rawURL))
	}
	return msg
}

// runGit runs cmd, a git command that writes into the mirror, and, when
// it fails, removes what it left there at once: git leaves the pack it
// was receiving (tmp_pack_*) when it dies, and its temporary and lock
// files too when it is killed (a stop kills its group: see procgroup.Run);
// what stands in for it (go-git, after a failed CLI fetch) needs the
// room. Callers hold m.mu.
func (m *Mirror) runGit(ctx context.Context, cmd *exec.Cmd) error {
	before := leftovers.Note(m.dir)
	err := procgroup.Run(ctx, cmd)
	if err != nil {
		before.Clear(m.dir)
	}
	return err
}

// cliFetch runs git fetch in the mirror for specs with the options in
// extra (--depth=N, --unshallow), credentials as cliClone gives them, then
// gives the mirror a fresh view of its store: filtered, for a mirror with
// a Filter. Callers hold m.mu.
func (m *Mirror) cliFetch(ctx context.Context, t gitutil.Transport, extra []string, specs ...string) error {
	if m.opts.Filter != "" {
		// Every fetch of a mirror with a Filter is filtered, from its
		// promisor remote, whose packs git marks as promisor packs. The
		// mirror says it is partial first: a crash after a pack is
		// stored must not leave a mirror that lacks files and says it is
		// full.
		if !m.partial {
			if err := m.markPartial(); err != nil {
				return err
			}
		}
		if err := m.cliFetchFrom(ctx, t, promisorRemote, append(extra, "--filter="+m.opts.Filter), specs...); err != nil {
			return err
		}
		return markPromisorPacks(m.dir)
	}
	return m.cliFetchFrom(ctx, t, m.url, extra, specs...)
}

// cliFetchFrom is cliFetch from remote: the mirror's URL, or the name of
// a remote whose URL it is.
func (m *Mirror) cliFetchFrom(ctx context.Context, t gitutil.Transport, remote string, extra []string, specs ...string) error {
	m.sent.Add(3)
	e, err := gitutil.ParseURL(m.url)
	if err != nil {
		return err
	}
	// A pack, always: the mirror reads no loose object; and no reflog.
	env, done, err := gitcli.Env(m.opts.TempDir, e, t, [2]string{"fetch.unpackLimit", "1"}, [2]string{"core.logAllRefUpdates", "false"})
	if err != nil {
		return err
	}
	defer done()
	args := append([]string{"fetch", "--progress", "--no-tags", "--no-write-fetch-head"}, extra...)
	args = append(append(args, "--", remote), specs...)
	cmd := exec.Command(m.opts.GitCLI, args...)
	cmd.Dir = m.dir
	cmd.Env = append(env, "GIT_DIR="+m.dir)
	cmd.WaitDelay = 5 * time.Second
	var out gitcli.TailBuffer
	cmd.Stderr = io.MultiWriter(&out, progressWriter{&m.progress}) // --no-write-fetch-head: nothing on stdout
	if err := m.runGit(ctx, cmd); err != nil {
		return m.gitFailed("git fetch", err, &out)
	}
	return m.reopen()
}
