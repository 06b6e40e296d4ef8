package mirror

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/modwatch/modwatch/gitutil"
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
	branch, err := cloneBranch(refs)
	if err != nil {
		return err
	}
	env, done, err := m.cliSetup(e, t)
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

// cliSetup is the environment of a git CLI command that reaches e with t
// (see cliEnv), its credential files in a private temporary directory
// that done removes.
func (m *Mirror) cliSetup(e gitutil.Endpoint, t gitutil.Transport, cfg ...[2]string) (env []string, done func(), err error) {
	if t.Auth == nil {
		t.Auth = &gitutil.Auth{}
	}
	if t.Auth.SSHPassphrase != "" {
		return nil, nil, fmt.Errorf("git CLI cannot use a passphrase-protected key non-interactively")
	}
	tmp, err := os.MkdirTemp(m.opts.TempDir, "modwatch-git-")
	if err != nil {
		return nil, nil, err
	}
	done = func() { _ = os.RemoveAll(tmp) }
	if env, err = cliEnv(tmp, e, t, cfg...); err != nil {
		done()
		return nil, nil, err
	}
	return env, done, nil
}

// cloneBranch is the branch or tag a clone of refs starts from: the first
// of them that is one.
func cloneBranch(refs []string) (string, error) {
	for _, r := range refs {
		if name, ok := strings.CutPrefix(r, "refs/heads/"); ok {
			return name, nil
		}
		if name, ok := strings.CutPrefix(r, "refs/tags/"); ok {
			return name, nil
		}
	}
	return "", fmt.Errorf("no branch or tag to clone")
}

// cliEnv is the git CLI's environment for a clone of e with t: no prompt,
// and every credential through the environment or a file under tmp (mode
// 0600), never argv. Configuration (with cfg's) goes in as GIT_CONFIG_*
// pairs.
func cliEnv(tmp string, e gitutil.Endpoint, t gitutil.Transport, cfg ...[2]string) ([]string, error) {
	a := t.Auth
	env := append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=", "SSH_ASKPASS=")
	switch e.Scheme {
	case "http", "https":
		hcfg, henv, err := cliHTTP(tmp, t)
		if err != nil {
			return nil, err
		}
		cfg, env = append(cfg, hcfg...), append(env, henv...)
	case "ssh":
		ids := ""
		for i, k := range a.SSHKeys() {
			key := filepath.Join(tmp, fmt.Sprintf("key-%d", i))
			if err := os.WriteFile(key, k, 0o600); err != nil {
				return nil, err
			}
			ids += " -i " + key
		}
		kh := filepath.Join(tmp, "known_hosts")
		if err := os.WriteFile(kh, a.KnownHosts, 0o600); err != nil {
			return nil, err
		}
		strict := "yes"
		if a.InsecureIgnoreHostKey {
			strict, kh = "no", os.DevNull
		}
		env = append(env, fmt.Sprintf("GIT_SSH_COMMAND=ssh -F /dev/null%s -o IdentitiesOnly=yes -o UserKnownHostsFile=%s -o StrictHostKeyChecking=%s -o BatchMode=yes", ids, kh, strict))
	}
	env = append(env, fmt.Sprintf("GIT_CONFIG_COUNT=%d", len(cfg)))
	for i, kv := range cfg {
		env = append(env, fmt.Sprintf("GIT_CONFIG_KEY_%d=%s", i, kv[0]), fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", i, kv[1]))
	}
	return env, nil
}

// cliHTTP is the configuration and environment of an HTTP(S) clone with t.
func cliHTTP(tmp string, t gitutil.Transport) (cfg [][2]string, env []string, err error) {
	a := t.Auth
	switch {
	case a.BearerToken != "":
		cfg = append(cfg, [2]string{"http.extraHeader", "Authorization: Bearer " + a.BearerToken})
	case a.Username != "" || a.Password != "":
		user := a.Username
		if user == "" {
			user = "git"
		}
		cred := base64.StdEncoding.EncodeToString([]byte(user + ":" + a.Password))
		cfg = append(cfg, [2]string{"http.extraHeader", "Authorization: Basic " + cred})
	}
	if len(a.CABundle) > 0 {
		p := filepath.Join(tmp, "ca.pem")
		if err := os.WriteFile(p, a.CABundle, 0o600); err != nil {
			return nil, nil, err
		}
		env = append(env, "GIT_SSL_CAINFO="+p)
	}
	if a.InsecureSkipTLSVerify {
		env = append(env, "GIT_SSL_NO_VERIFY=1")
	}
	if a.Proxy != nil {
		po := t.Proxy // checked by Auth.Transport
		u, err := po.FullURL()
		if err != nil {
			return nil, nil, err
		}
		// Through the environment, as the other credentials: never argv.
		// The proxy carries everything, as go-git's does: NO_PROXY is
		// not consulted.
		cfg = append(cfg, [2]string{"http.proxy", u.String()})
		if po.Username != "" {
			// Basic at once, as go-git: curl's "anyauth" asks first
			// without credentials.
			cfg = append(cfg, [2]string{"http.proxyAuthMethod", "basic"})
		}
		env = append(env, "NO_PROXY=", "no_proxy=")
	}
	return cfg, env, nil
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
	var out tailBuffer
	cmd.Stderr = io.MultiWriter(&out, progressWriter{&m.progress}) // clone writes nothing to stdout
	if err := procgroup.Run(ctx, cmd); err != nil {
		return m.gitFailed("git clone", err, &out)
	}
	return nil
}

// gitFailed is the error of a git command that failed: the last KiB of
// what it wrote, without the mirror's URL's secrets.
func (m *Mirror) gitFailed(what string, err error, out *tailBuffer) error {
	msg := strings.TrimSpace(out.String())
	if len(msg) > 1024 {
		msg = msg[len(msg)-1024:]
	}
	return fmt.Errorf("%s: %w: %s", what, err, scrub(msg, m.url))
}

// scrub removes the raw URL (which may carry credentials) from a message
// produced by a lower layer.
func scrub(msg, rawURL string) string {
	if rawURL != "" && rawURL != gitutil.RedactURL(rawURL) {
		msg = strings.ReplaceAll(msg, rawURL, gitutil.RedactURL(rawURL))
	}
	return msg
}

// tailBuffer keeps the last 4 KiB written to it: what a git command
// writes on stderr, which a remote's progress messages can make endless.
type tailBuffer struct{ b []byte }

const tailKeep = 4 << 10

func (t *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) > tailKeep {
		p = p[len(p)-tailKeep:]
	}
	if over := len(t.b) + len(p) - tailKeep; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	t.b = append(t.b, p...)
	return n, nil
}

func (t *tailBuffer) String() string { return string(t.b) }

// runGit runs cmd, a git command that writes into the mirror, and, when
// it fails, removes what it left there at once: git leaves the pack it
// was receiving (tmp_pack_*) when it dies, and its temporary and lock
// files too when it is killed (a stop kills its group: see procgroup.Run);
// what stands in for it (go-git, after a failed CLI fetch) needs the
// room. Callers hold m.mu.
func (m *Mirror) runGit(ctx context.Context, cmd *exec.Cmd) error {
	before := noteTemporaries(m.dir)
	err := procgroup.Run(ctx, cmd)
	if err != nil {
		before.clear(m.dir)
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
	e, err := gitutil.ParseURL(m.url)
	if err != nil {
		return err
	}
	// A pack, always: the mirror reads no loose object; and no reflog.
	env, done, err := m.cliSetup(e, t, [2]string{"fetch.unpackLimit", "1"}, [2]string{"core.logAllRefUpdates", "false"})
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
	var out tailBuffer
	cmd.Stderr = io.MultiWriter(&out, progressWriter{&m.progress}) // --no-write-fetch-head: nothing on stdout
	if err := m.runGit(ctx, cmd); err != nil {
		return m.gitFailed("git fetch", err, &out)
	}
	return m.reopen()
}
