// Command gitsync is a git-sync (v4) style sidecar built on the library:
// some of git-sync's flags and their GITSYNC_* environment variables with
// the same meaning, and its symlink contract — root/link is a symlink
// swapped atomically to a complete tree of the synced commit, then the
// exechook runs in that tree (GITSYNC_HASH set) and the webhook is called.
// It is not yet a drop-in (docs/migrating.md lists what differs). What it
// adds: --path publishes one directory of the
// repository and syncs only when something under it changed; --also syncs
// more repositories or paths in the same process (one poll per remote);
// --hook-bind takes push webhooks (GitHub's, or a generic HMAC-signed one)
// and syncs at once; --commit-file writes the commit into each tree.
//
//	go run ./examples/gitsync --repo https://github.com/stefanprodan/podinfo --root /tmp/git --link podinfo --period 30s
//
// Flags, and GITSYNC_ or GIT_SYNC_ variables, this program does not take
// fail at start, by name. --depth is taken for git-sync's spelling and said
// at start not to be honoured: the mirror keeps full history.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/sink/dir"
	"github.com/modwatch/modwatch/sink/hook"
	"github.com/modwatch/modwatch/source/static"
	"github.com/modwatch/modwatch/source/webhook"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/metrics"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Environ(), os.Stderr))
}

// config is git-sync's flags that this program honours.
type config struct {
	repo, ref, root, link, path                    string
	period, exechookTimeout, staleWorktreeTimeout  time.Duration
	depth, maxFailures, verbose                    int
	depthSet                                       bool
	oneTime                                        bool
	exechookCommand, webhookURL                    string
	username, passwordFile, sshKeyFile, knownHosts string
	password                                       string // GITSYNC_PASSWORD: never a flag, as git-sync
	httpBind, cacheDir                             string
	commitFile, hookBind, touchFile                string
	hookSecretFile, hookGitHubSecretFile           string
	also                                           []watcher.Target
}

// alsoFlag parses --also link=NAME,repo=URL[,ref=REF][,path=DIR].
type alsoFlag struct{ targets *[]watcher.Target }

func (a alsoFlag) String() string { return "" }

func (a alsoFlag) Set(v string) error {
	var t watcher.Target
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("%q is not key=value", kv)
		}
		switch k {
		case "link":
			t.ID = val
		case "repo":
			t.URL = val
		case "ref":
			if val != "HEAD" {
				t.Revision = val
			}
		case "path":
			t.Path = val
		default:
			return fmt.Errorf("unknown key %q (link, repo, ref, path)", k)
		}
	}
	if t.ID == "" || t.URL == "" {
		return errors.New("link= and repo= are required")
	}
	*a.targets = append(*a.targets, t)
	return nil
}

// parse reads flags, then GITSYNC_* variables for the flags not given
// (git-sync's precedence), from environ ("NAME=value"). A GITSYNC_ or
// GIT_SYNC_ variable it does not take is an error, as a flag is: a
// setting of git-sync's that this program would drop is never dropped
// without a word.
func parse(args []string, environ []string, stderr io.Writer) (config, error) {
	vars := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	getenv := func(k string) string { return vars[k] }
	var c config
	fs := flag.NewFlagSet("gitsync", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.repo, "repo", "", "the git repository to sync (required)")
	fs.StringVar(&c.ref, "ref", "HEAD", "the git revision (branch, tag, or hash) to sync")
	fs.StringVar(&c.root, "root", "", "the root directory for git-sync operations (required)")
	fs.StringVar(&c.link, "link", "", "the path (absolute or relative to --root) at which to create a symlink to the synced tree (default: the repository's name)")
	fs.StringVar(&c.path, "path", "", "modwatch: publish only this directory of the repository, and sync only when it changed")
	fs.DurationVar(&c.period, "period", 10*time.Second, "how long to wait between sync attempts")
	fs.IntVar(&c.depth, "depth", 1, "git-sync's history depth: not honoured, and said so at start (the mirror keeps full history)")
	fs.BoolVar(&c.oneTime, "one-time", false, "exit after the first sync")
	fs.IntVar(&c.maxFailures, "max-failures", 0, "the number of consecutive failures allowed before aborting (-1: no limit)")
	fs.StringVar(&c.exechookCommand, "exechook-command", "", "a command to run in the synced tree after each sync")
	fs.DurationVar(&c.exechookTimeout, "exechook-timeout", 30*time.Second, "the timeout for the exechook")
	fs.StringVar(&c.webhookURL, "webhook-url", "", "a URL to POST to after each sync")
	fs.StringVar(&c.username, "username", "", "the username to use for git auth")
	fs.StringVar(&c.passwordFile, "password-file", "", "the file from which the password or personal access token for git auth will be sourced")
	fs.StringVar(&c.sshKeyFile, "ssh-key-file", "", "the SSH key to use")
	fs.StringVar(&c.knownHosts, "ssh-known-hosts-file", "", "the known_hosts file to use")
	fs.StringVar(&c.httpBind, "http-bind", "", "the bind address (including port) for the HTTP endpoint: / (health) and /metrics")
	fs.DurationVar(&c.staleWorktreeTimeout, "stale-worktree-timeout", 0, "how long to retain the previous tree after a sync")
	fs.IntVar(&c.verbose, "v", 0, "logging verbosity")
	fs.StringVar(&c.cacheDir, "cache-dir", "", "modwatch: where the mirror lives (default: root/.mirrors)")
	fs.StringVar(&c.commitFile, "commit-file", "", "modwatch: write the synced commit into this file at the top of each tree")
	fs.StringVar(&c.touchFile, "touch-file", "", "a file to touch (create, or update its times) after each sync that published a new commit (absolute or relative to --root)")
	fs.Var(alsoFlag{&c.also}, "also", "modwatch: also sync link=NAME,repo=URL[,ref=REF][,path=DIR] under --root (repeatable)")
	fs.StringVar(&c.hookBind, "hook-bind", "", "modwatch: take push webhooks on this address (POST /hooks) and sync at once")
	fs.StringVar(&c.hookSecretFile, "hook-secret-file", "", "modwatch: the secret of generic webhooks (X-Signature: sha256=HMAC)")
	fs.StringVar(&c.hookGitHubSecretFile, "hook-github-secret-file", "", "modwatch: the secret of GitHub webhooks")

	// A variable is a default: the command line wins.
	var envErr error
	known := map[string]bool{"GITSYNC_PASSWORD": true}
	fs.VisitAll(func(f *flag.Flag) {
		name := "GITSYNC_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		known[name] = true
		if v := getenv(name); v != "" && envErr == nil {
			if err := f.Value.Set(v); err != nil {
				envErr = fmt.Errorf("%s=%q: %w", name, v, err)
			}
		}
	})
	if envErr != nil {
		return c, envErr
	}
	var unknown []string
	for k := range vars {
		if (strings.HasPrefix(k, "GITSYNC_") || strings.HasPrefix(k, "GIT_SYNC_")) && !known[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return c, fmt.Errorf("environment variables this program does not take: %s", strings.Join(unknown, ", "))
	}
	c.password = getenv("GITSYNC_PASSWORD")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	fs.Visit(func(f *flag.Flag) { c.depthSet = c.depthSet || f.Name == "depth" })
	c.depthSet = c.depthSet || getenv("GITSYNC_DEPTH") != ""
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	case c.repo == "":
		return c, errors.New("--repo (or GITSYNC_REPO) is required")
	case c.root == "":
		return c, errors.New("--root (or GITSYNC_ROOT) is required")
	case c.period <= 0:
		return c, errors.New("--period must be positive")
	}
	if c.link == "" {
		c.link = strings.TrimSuffix(path.Base(strings.TrimRight(c.repo, "/")), ".git")
	}
	if filepath.IsAbs(c.link) {
		rel, err := filepath.Rel(c.root, c.link)
		if err != nil || strings.HasPrefix(rel, "..") {
			return c, fmt.Errorf("--link %s is not under --root %s", c.link, c.root)
		}
		c.link = rel
	}
	if c.link == "" || c.link == "." || strings.Contains(c.link, string(filepath.Separator)) {
		return c, fmt.Errorf("--link %q must name one entry of --root", c.link)
	}
	if c.cacheDir == "" {
		c.cacheDir = filepath.Join(c.root, ".mirrors")
	}
	for _, t := range c.also {
		if t.ID == c.link || t.ID == "." || t.ID == ".." || strings.ContainsAny(t.ID, `/\`) {
			return c, fmt.Errorf("--also link=%q must name one entry of --root, not --link's", t.ID)
		}
	}
	if c.hookBind != "" && c.hookSecretFile == "" && c.hookGitHubSecretFile == "" {
		return c, errors.New("--hook-bind needs --hook-secret-file or --hook-github-secret-file: unsigned webhooks are refused")
	}
	return c, nil
}

// hookConfig reads the webhook secrets.
func (c config) hookConfig() (webhook.Config, error) {
	var cfg webhook.Config
	for _, f := range []struct {
		path string
		into *string
	}{{c.hookSecretFile, &cfg.GenericSecret}, {c.hookGitHubSecretFile, &cfg.GitHubSecret}} {
		if f.path == "" {
			continue
		}
		data, err := os.ReadFile(f.path)
		if err != nil {
			return cfg, err
		}
		*f.into = strings.TrimSpace(string(data))
	}
	return cfg, nil
}

// auth reads the credentials the flags name.
func (c config) auth() (*gitutil.Auth, error) {
	a := &gitutil.Auth{Username: c.username, Password: c.password, AllowInsecureHTTP: true}
	if c.passwordFile != "" && c.password != "" {
		return nil, errors.New("GITSYNC_PASSWORD and --password-file are exclusive")
	}
	if c.passwordFile != "" {
		pw, err := os.ReadFile(c.passwordFile)
		if err != nil {
			return nil, fmt.Errorf("--password-file: %w", err)
		}
		a.Password = strings.TrimRight(string(pw), "\r\n")
	}
	if c.sshKeyFile != "" {
		key, err := os.ReadFile(c.sshKeyFile)
		if err != nil {
			return nil, fmt.Errorf("--ssh-key-file: %w", err)
		}
		a.SSHPrivateKey = key
		if c.knownHosts == "" {
			return nil, errors.New("--ssh-key-file needs --ssh-known-hosts-file")
		}
		if a.KnownHosts, err = os.ReadFile(c.knownHosts); err != nil {
			return nil, fmt.Errorf("--ssh-known-hosts-file: %w", err)
		}
	}
	if a.Username == "" && a.Password == "" && a.SSHPrivateKey == nil {
		return nil, nil
	}
	return a, nil
}

// run is the program; it returns the exit code.
func run(ctx context.Context, args []string, environ []string, stderr io.Writer) int {
	c, err := parse(args, environ, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "gitsync:", err)
		return 2
	}
	log := logr.FromSlogHandler(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.Level(-c.verbose)}))
	if err := syncRepo(ctx, c, log); err != nil {
		log.Error(err, "gitsync failed")
		return 1
	}
	return 0
}

// syncRepo is the wiring: one target, a chain of publish, exechook and
// webhook, and a watcher.
func syncRepo(ctx context.Context, c config, log logr.Logger) error {
	auth, err := c.auth()
	if err != nil {
		return err
	}
	revision := c.ref
	if revision == "HEAD" {
		revision = ""
	}
	targets := []watcher.Target{{ID: c.link, URL: c.repo, Revision: revision, Path: c.path, Auth: auth}}
	for _, t := range c.also {
		t.Auth = auth
		targets = append(targets, t)
	}

	// A target's ID is its link's name.
	steps := []watcher.Sink{dir.New(c.root, dir.WithStaleGrace(c.staleWorktreeTimeout), dir.WithCommitFile(c.commitFile),
		dir.WithLinkName(func(t watcher.Target) string { return t.ID }))}
	if c.exechookCommand != "" {
		steps = append(steps, hook.Command(c.exechookCommand, nil, hook.WithExecTimeout(c.exechookTimeout),
			hook.WithExecEnv(func(c watcher.Change) []string { return []string{"GITSYNC_HASH=" + c.To} })))
	}
	if c.webhookURL != "" {
		steps = append(steps, hook.Post(c.webhookURL))
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		failures int
		failed   error
		w        *watcher.Watcher
		synced   = map[string]bool{}
	)
	outcome := watcher.ObserverFunc(func(e watcher.Event) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case e.Type == watcher.EventPolled && e.Err == nil && w.Stats().Failing == 0:
			failures = 0 // a sync with nothing new
		case e.Type == watcher.EventDelivered:
			failures = 0
			synced[e.Target.ID] = true
			if c.touchFile != "" && e.Target.ID == c.link {
				if err := touch(absUnder(c.root, c.touchFile)); err != nil {
					log.Error(err, "touch-file not touched", "path", c.touchFile)
				}
			}
			if c.oneTime && len(synced) == len(targets) {
				cancel()
			}
		case e.Type == watcher.EventInvalidTarget:
			// Reported once, and no retry makes it valid: with --one-time
			// (or past --max-failures) the command ends with it.
			failures++
			if (c.oneTime || (c.maxFailures >= 0 && failures > c.maxFailures)) && failed == nil {
				failed = fmt.Errorf("invalid target: %w", e.Err)
				cancel()
			}
		case e.Type == watcher.EventDeliveryFailed || e.Type == watcher.EventTargetFailed || e.Type == watcher.EventRefVanished:
			failures++
			if c.maxFailures >= 0 && failures > c.maxFailures && failed == nil {
				failed = fmt.Errorf("%d consecutive failures, more than --max-failures=%d: %w", failures, c.maxFailures, e.Err)
				cancel()
			}
		}
	})
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		return err
	}
	gs, err := newGitSyncMetrics(reg, c.link, c.repo)
	if err != nil {
		return err
	}
	// One user's sidecar, as git-sync: local repositories and credentials
	// over plain http:// are the user's to choose (a watcher serving many
	// tenants refuses both).
	w = watcher.New(watcher.WithCacheDir(c.cacheDir), watcher.WithLocalRepositories(),
		watcher.WithInterval(c.period), watcher.WithMinInterval(min(c.period, watcher.DefaultMinInterval)),
		watcher.WithObserver(outcome, m, watcher.ObserverFunc(gs.observe)))
	if err := w.Route(static.New(targets...), watcher.Chain("git-sync", steps...)); err != nil {
		return err
	}
	if c.hookBind != "" {
		cfg, err := c.hookConfig()
		if err != nil {
			return err
		}
		hooks, err := webhook.New(cfg, w)
		if err != nil {
			return err
		}
		defer hooks.Close()
		mux := http.NewServeMux()
		mux.Handle("POST /hooks", hooks)
		srv, err := listenAndServe(logr.NewContext(ctx, log), c.hookBind, mux)
		if err != nil {
			return err
		}
		defer srv.Close()
	}
	if c.httpBind != "" {
		if err := m.CollectStats(w); err != nil {
			return err
		}
		srv, err := serve(c.httpBind, reg, w)
		if err != nil {
			return err
		}
		defer srv.Close()
	}
	if c.depthSet {
		// Said, not dropped: what git-sync's depth bounds (the history a
		// worktree shows, the disk) is not what this program keeps.
		log.Info("--depth is not honoured: the mirror keeps the full history and the tree holds the commit's files only", "depth", c.depth)
	}
	log.Info("syncing", "repo", gitutil.RedactURL(c.repo), "ref", c.ref, "link", filepath.Join(c.root, c.link))
	if err := w.Run(logr.NewContext(ctx, log)); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	return failed
}

// absUnder is p, absolute, or relative to root.
func absUnder(root, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(root, p)
}

// touch makes the file at path exist with its times now, creating the
// directories to it, as git-sync's touch-file.
func touch(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o775); err != nil {
		return err
	}
	now := time.Now()
	err := os.Chtimes(path, now, now)
	if errors.Is(err, fs.ErrNotExist) {
		f, cerr := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644)
		if cerr != nil {
			return cerr
		}
		return f.Close()
	}
	return err
}

// serve answers / (200 once the tree has been synced, 503 before or while
// failing) and /metrics.
func serve(addr string, reg *prometheus.Registry, w *watcher.Watcher) (*http.Server, error) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /{$}", func(rw http.ResponseWriter, _ *http.Request) {
		if st := w.Stats(); !st.Synced || st.Failing > 0 || st.Invalid > 0 {
			http.Error(rw, "not synced", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(rw, "ok")
	})
	return listenAndServe(context.Background(), addr, mux)
}

// listenAndServe serves h on addr until the server is closed; it fails at
// once when addr cannot be listened on.
func listenAndServe(base context.Context, addr string, h http.Handler) (*http.Server, error) {
	// The handlers log to their request's context: base's logger.
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(base) }}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	go func() { _ = srv.Serve(ln) }()
	return srv, nil
}
