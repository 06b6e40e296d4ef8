package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/filewatch"
	"github.com/modwatch/modwatch/sink/dir"
	"github.com/modwatch/modwatch/sink/hook"
	"github.com/modwatch/modwatch/source/static"
	"github.com/modwatch/modwatch/source/webhook"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/metrics"
)

// syncRepo is the wiring: the --repo target published as git-sync's
// worktrees with git-sync's hooks, the --also targets as trees of
// sink/dir, one watcher for them all.
func syncRepo(ctx context.Context, c config, log logr.Logger) error {
	auth, err := c.auth()
	if err != nil {
		return err
	}
	// git-sync's umask, process-wide as there: 022, or 002 with
	// --group-write, whatever the process was given.
	umask := 0o022
	if c.groupWrite {
		umask = 0o002
	}
	syscall.Umask(umask)
	// Root, as git-sync makes it: 0775 less the umask, before the mirrors'
	// directory in it (0700) would make it so.
	if err := os.MkdirAll(c.root, 0o775); err != nil {
		return fmt.Errorf("making --root: %w", err)
	}
	for _, n := range c.notes {
		log.Info(n)
	}
	if c.addUser {
		if err := addUser("/etc/passwd"); err != nil {
			log.Error(err, "--add-user: no passwd record added; ssh may not find the user")
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The process's go_* and process_* metrics, as git-sync's default
	// registry has them, beside git-sync's and the library's.
	reg := prometheus.NewRegistry()
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return err
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return err
	}
	s := &session{c: c, log: log, cancel: cancel, synced: map[string]bool{}, initial: newInitialSync(), sharing: newSharing(c.root, umask)}
	s.source = &repoSource{initial: s.initial, trigger: func() bool { return s.w.Trigger(c.repo) }, log: log}
	if s.gs, err = newGitSyncMetrics(reg, c.link, c.repo); err != nil {
		return err
	}
	if c.askpassURL != "" {
		if s.creds, err = listenCredentials(log); err != nil {
			return fmt.Errorf("--askpass-url: the credential socket: %w", err)
		}
		defer s.creds.close()
		defer setenv(credentialSocketEnv, s.creds.path())()
	}
	var hooks sync.WaitGroup
	defer hooks.Wait()
	defer cancel() // before the wait: the hook runners end with ctx
	s.ctx, s.wg = ctx, &hooks
	s.startHooks(ctx, &hooks)
	w, m, err := s.watcher(reg, auth)
	if err != nil {
		return err
	}
	if err := s.wt.git.configure(ctx, c.cacheDir, c.gitConfigs); err != nil {
		return err
	}
	// Every git the process runs reads that configuration, as every git
	// git-sync runs reads the one it writes: the watcher's fetches by
	// --git, and the upload-pack go-git runs for a file:// repository,
	// which refuses one another user owns without safe.directory.
	defer setenv("GIT_CONFIG_GLOBAL", s.wt.git.global)()
	stop, err := s.servers(ctx, reg, w, m)
	defer stop()
	if err != nil {
		return err
	}
	if c.signal != nil {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, c.signal)
		defer signal.Stop(sigs)
		hooks.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-sigs:
					w.Trigger(c.repo)
				}
			}
		})
	}
	log.Info("syncing", "repo", gitutil.RedactURL(c.repo), "ref", c.ref, "link", c.link)
	if err := w.Run(logr.NewContext(ctx, log)); err != nil {
		return err
	}
	return s.result()
}

// session is the state of one run of the command: failures counted as
// git-sync counts them, the hooks, the outcome.
type session struct {
	c      config
	log    logr.Logger
	ctx    context.Context // the run's: ends when it does
	wg     *sync.WaitGroup // what the run waits for: hook runners, the --one-time end
	cancel context.CancelFunc
	gs     *gitSyncMetrics
	source *repoSource
	// initial is the first sync of --repo, which ends --init-period.
	initial *initialSync
	hooks   struct{ pre, exec, web *hookRunner }
	wt      *worktrees
	w       *watcher.Watcher
	// sharing makes the mirrors usable to the volume's consumers.
	sharing sharing
	// creds serves --askpass-url's credentials to git (nil without it).
	creds *credentialSocket
	// askpass asks --askpass-url before each sync attempt (nil without it).
	askpass *askpass

	mu          sync.Mutex
	failures    int
	initialDone bool
	everSynced  atomic.Bool // a sync of --repo published, or was the process's first
	failed      error
	synced      map[string]bool
	ending      bool
}

// watcher builds the watcher and its routes.
func (s *session) watcher(reg *prometheus.Registry, auth *gitutil.Auth) (*watcher.Watcher, *metrics.Metrics, error) {
	c := s.c
	m, err := metrics.New(reg)
	if err != nil {
		return nil, nil, err
	}
	revision := c.ref
	if revision == "HEAD" {
		revision = ""
	}
	// --git makes every fetch, and a --git that fails fails the sync, as
	// git-sync's: go-git never stands in for the git the user gave.
	git := &mirrorDirs{Git: watcher.GoGit{GitCLI: c.gitBin, CLIFetches: true}, origin: c.repo, depth: c.depth, filter: c.filter, log: s.log,
		initial: s.initial}
	if c.askpassURL != "" {
		s.askpass = &askpass{ask: c.askpass, repo: c.repo, creds: s.creds, heard: s.gs.askpass}
		git.askpass = s.askpass
	}
	s.wt = s.worktrees(git)
	s.wt.shared = c.alsoOfTheRepository()
	s.source.target = watcher.Target{ID: c.link, URL: c.repo, Revision: revision, Path: c.path, Auth: auth}
	s.source.init, s.source.period = c.initPeriod, c.period
	switch {
	case c.askpassURL != "":
		// Asked at each poll's listing (see askpass), not here.
	case c.passwordFile != "":
		s.source.auth = func(context.Context) (*gitutil.Auth, error) { return c.auth() }
		s.source.authFile = c.passwordFile
	case isSSH(c.repo):
		// The key files and known hosts are read again every period, as
		// ssh reads them at each of git-sync's fetches: a rotated
		// Secret is used from the next period on.
		s.source.auth = func(context.Context) (*gitutil.Auth, error) { return c.auth() }
	}
	lo, hi := min(c.initPeriod, c.period), max(c.initPeriod, c.period)
	// One user's sidecar, as git-sync: local repositories and credentials
	// over plain http:// are the user's to choose (a watcher serving many
	// tenants refuses both).
	w := watcher.New(watcher.WithCacheDir(c.cacheDir), watcher.WithLocalRepositories(), watcher.WithGit(git),
		watcher.WithInterval(c.period), watcher.WithMinInterval(min(lo, watcher.DefaultMinInterval)),
		watcher.WithRetryBackoff(watcher.Backoff{Min: lo, Max: hi}), watcher.WithJitter(0),
		watcher.WithTimeouts(watcher.Timeouts{List: min(c.syncTimeout, 30*time.Second), Fetch: c.syncTimeout, Deliver: c.syncTimeout}),
		watcher.WithObserver(watcher.ObserverFunc(s.observe), m, watcher.ObserverFunc(s.gs.observe)))
	s.w = w
	if err := w.Route(s.source, s.wt); err != nil {
		return nil, nil, err
	}
	if len(c.also) > 0 {
		if err := w.Route(static.New(s.alsoTargets(auth)...), s.alsoChain()); err != nil {
			return nil, nil, err
		}
	}
	return w, m, nil
}

// worktrees is the sink of the --repo target.
func (s *session) worktrees(git *mirrorDirs) *worktrees {
	c := s.c
	return &worktrees{
		root: c.root, link: c.link, origin: c.repo, path: c.path, git: gitRunner{bin: c.gitBin, ssh: c.sshCommand(os.Getenv("GIT_SSH_COMMAND"))}, mirrors: git,
		depth: c.depth, filter: c.filter, sparseFile: c.sparseFile, submodules: c.submodules, gc: c.gitGC, commitFile: c.commitFile,
		stale: c.staleWorktreeTimeout, period: c.period, log: s.log, cacheDir: c.cacheDir, sharing: s.sharing,
		prePublish: func(hash string) {
			if s.hooks.pre != nil {
				s.hooks.pre.send(hash)
			}
		},
		synced: s.mainSynced,
		credentials: func(a *gitutil.Auth) ([]credential, error) {
			if s.askpass != nil {
				a = s.askpass.auth(a) // the last answer, the one the commit was fetched with
			}
			return c.gitCredentials(a)
		},
	}
}

// alsoOfTheRepository reports whether an --also target reads the
// repository --repo names (the same mirror).
func (c *config) alsoOfTheRepository() bool {
	repo, err := gitutil.NormalizeURL(c.repo)
	for _, t := range c.also {
		if u, uerr := gitutil.NormalizeURL(t.URL); err != nil || uerr != nil || u == repo {
			return true
		}
	}
	return false
}

// alsoTargets are the --also targets, with the command's credentials.
func (s *session) alsoTargets(auth *gitutil.Auth) []watcher.Target {
	var targets []watcher.Target
	for _, t := range s.c.also {
		t.Auth = auth
		targets = append(targets, t)
	}
	return targets
}

// alsoChain publishes an --also target's tree, then runs the exechook and
// the webhook in turn, the library's way: each a step of the delivery.
func (s *session) alsoChain() watcher.Sink {
	c := s.c
	steps := []watcher.Sink{dir.New(c.root, dir.WithStaleGrace(c.staleWorktreeTimeout), dir.WithCommitFile(c.commitFile),
		dir.WithLinkName(func(t watcher.Target) string { return t.ID }))}
	if c.exechookCommand != "" {
		steps = append(steps, hook.Command(c.exechookCommand, nil, hook.WithExecTimeout(c.exechookTimeout),
			hook.WithExecEnv(func(c watcher.Change) []string { return []string{"GITSYNC_HASH=" + c.To.String()} })))
	}
	if c.webhookURL != "" {
		steps = append(steps, s.webhook())
	}
	return watcher.Chain("also", steps...)
}

// webhook is git-sync's: its method, the commit in Gitsync-Hash, one
// status that is success (0: any).
func (s *session) webhook() *hook.HTTP {
	c := s.c
	return hook.Post(c.webhookURL, hook.WithMethod(c.webhookMethod), hook.WithSuccessStatus(c.webhookStatus),
		hook.WithCommitHeader("Gitsync-Hash"), hook.WithHTTPTimeout(c.webhookTimeout))
}

// hookChange is the change a hook of the --repo target is run for: its
// commit is hash.
func (s *session) hookChange(hash string) (watcher.Change, error) {
	to, err := gitutil.ParseHash(hash)
	if err != nil {
		return watcher.Change{}, err
	}
	return watcher.Change{Target: watcher.Target{ID: s.c.link, URL: s.c.repo, Path: s.c.path}, To: to}, nil
}

// startHooks starts git-sync's hook runners of the --repo target.
func (s *session) startHooks(ctx context.Context, wg *sync.WaitGroup) {
	c := s.c
	runs := s.gs.hookRuns
	exec := func(command string, timeout time.Duration) func(context.Context, string) error {
		return func(ctx context.Context, hash string) error {
			h := hook.Command(command, nil, hook.WithDir(s.wt.worktreeFor(hash)), hook.WithExecTimeout(timeout),
				hook.WithExecEnv(func(watcher.Change) []string { return []string{"GITSYNC_HASH=" + hash} }))
			ch, err := s.hookChange(hash)
			if err != nil {
				return err
			}
			return h.Deliver(ctx, ch)
		}
	}
	if c.prePublishCommand != "" {
		s.hooks.pre = newHookRunner("pre-publish-exechook", exec(c.prePublishCommand, c.prePublishTimeout), c.prePublishBackoff, c.oneTime, s.log, runs)
	}
	if c.exechookCommand != "" {
		s.hooks.exec = newHookRunner("exechook", exec(c.exechookCommand, c.exechookTimeout), c.exechookBackoff, c.oneTime, s.log, runs)
	}
	if c.webhookURL != "" {
		web := s.webhook()
		s.hooks.web = newHookRunner("webhook", func(ctx context.Context, hash string) error {
			ch, err := s.hookChange(hash)
			if err != nil {
				return err
			}
			return web.Deliver(ctx, ch)
		}, c.webhookBackoff, c.oneTime, s.log, runs)
	}
	for _, r := range []*hookRunner{s.hooks.pre, s.hooks.exec, s.hooks.web} {
		if r != nil {
			wg.Go(func() { r.run(ctx) })
		}
	}
}

// mainSynced is called by the worktree sink after a sync that published
// the --repo target, or the first of the process: git-sync's success.
func (s *session) mainSynced(hash string, took time.Duration) {
	s.initial.end()
	s.everSynced.Store(true) // before the touch file: health is 200 once it is there
	for _, r := range []*hookRunner{s.hooks.exec, s.hooks.web} {
		if r != nil {
			r.send(hash)
		}
	}
	s.gs.success(took)
	if s.c.touchFile != "" {
		if err := touch(absUnder(s.c.root, s.c.touchFile)); err != nil {
			s.log.Error(err, "touch-file not touched", "path", s.c.touchFile)
		}
	}
}

// observe counts failures and successes as git-sync does, writes the
// error file, and ends a --one-time run.
func (s *session) observe(e watcher.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case e.Type == watcher.EventPolled && e.Err == nil && s.w.Stats().Failing == 0:
		s.failures = 0 // a sync with nothing new
	case e.Type == watcher.EventDelivered:
		s.delivered(e)
	case e.Type == watcher.EventInvalidTarget:
		// Reported once, and no retry makes it valid: with --one-time
		// (or past --max-failures) the command ends with it.
		s.failures++
		s.writeError(e.Err)
		if (s.c.oneTime || s.tooMany()) && s.failed == nil {
			s.fail(fmt.Errorf("invalid target: %w", e.Err))
		}
	case e.Type == watcher.EventDeliveryFailed || e.Type == watcher.EventTargetFailed || e.Type == watcher.EventRefVanished:
		s.failures++
		s.writeError(e.Err)
		if s.tooMany() && s.failed == nil {
			s.fail(fmt.Errorf("%d consecutive failures, more than --max-failures=%d: %w", s.failures, s.maxFailures(), e.Err))
		}
	}
}

func (s *session) delivered(e watcher.Event) {
	s.failures = 0
	s.synced[e.Target.ID] = true
	if e.Target.ID == s.c.link {
		s.initialDone = true // --init-max-failures no longer applies
	}
	if f := s.errorFile(); f != "" {
		_ = os.Remove(f)
	}
	if s.c.oneTime && len(s.synced) == 1+len(s.c.also) && !s.ending {
		s.ending = true
		s.wg.Go(s.endOneTime)
	}
}

// initialSynced reports whether the --repo target was synced once: health
// is 503 before, as git-sync's.
func (s *session) initialSynced() bool { return s.everSynced.Load() }

// endOneTime waits for the first run of each hook that was sent, as
// git-sync's --one-time does, and ends the run: failed when one failed.
func (s *session) endOneTime() {
	ctx := s.ctx
	for _, r := range []*hookRunner{s.hooks.pre, s.hooks.exec, s.hooks.web} {
		if r == nil || !r.wasSent() {
			continue
		}
		if err := r.wait(ctx); err != nil {
			s.mu.Lock()
			if s.failed == nil {
				s.failed = fmt.Errorf("%s: %w", r.name, err)
			}
			s.mu.Unlock()
		}
	}
	s.cancel()
}

func (s *session) maxFailures() int {
	if !s.initialDone && s.c.initMaxFailuresSet {
		return s.c.initMaxFailures
	}
	return s.c.maxFailures
}

func (s *session) tooMany() bool {
	limit := s.maxFailures()
	return limit >= 0 && s.failures > limit
}

func (s *session) fail(err error) {
	s.failed = err
	s.cancel()
}

func (s *session) result() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}

func (s *session) errorFile() string {
	if s.c.errorFile == "" {
		return ""
	}
	return absUnder(s.c.root, s.c.errorFile)
}

// writeError writes the sync error to --error-file, as git-sync: a JSON
// object with the message, the error and the failure count. A ref the
// remote lacks is said in git's words too, which tools written for
// git-sync look for.
func (s *session) writeError(err error) {
	f := s.errorFile()
	if f == "" || err == nil {
		return
	}
	msg := err.Error()
	if errors.Is(err, gitutil.ErrRefNotFound) {
		msg = fmt.Sprintf("couldn't find remote ref %s: %s", s.c.ref, msg)
	}
	// git-sync's shape: its logger's error payload (Msg, Err, Args).
	data, _ := json.Marshal(struct {
		Msg, Err string
		Args     map[string]any
	}{"error syncing repo, will retry", msg, map[string]any{"failCount": s.failures}})
	if werr := writeAtomic(f, append(data, '\n')); werr != nil {
		s.log.Error(werr, "error-file not written", "path", f)
	}
}

// repoSource gives the --repo target, polled every --period. An
// --init-period shorter than --period is kept by pokes (trigger) until the
// first sync, which stop at it at once (see initialSync): no target's
// interval changes then. (A longer one is not kept: a target's interval
// is at most the watcher's, --period.) With a --password-file (or an SSH
// key) it reads the credentials again every --init-period, then every
// period, and gives the target again when they changed. (--askpass-url is
// asked at each poll: see askpass.)
type repoSource struct {
	target       watcher.Target
	init, period time.Duration
	initial      *initialSync
	trigger      func() bool // a poll of the target now (watcher.Trigger)
	auth         func(context.Context) (*gitutil.Auth, error)
	authFile     string // read again as soon as it changes (--password-file)
	log          logr.Logger
}

// Run implements watcher.Source.
func (p *repoSource) Run(ctx context.Context, update func([]watcher.Target)) error {
	pokes, done := p.init < p.period, p.initial.ended
	give := func() {
		t := p.target
		t.Interval = p.period
		update([]watcher.Target{t})
	}
	refresh := func() {
		a, err := p.auth(ctx)
		if err != nil {
			if ctx.Err() == nil {
				p.log.Error(err, "credentials not had; the last ones are kept")
			}
			return
		}
		if old := p.target.Auth; !sameAuth(old, a) {
			p.target.Auth = a
			give()
		}
	}
	give()
	changed := make(chan struct{}, 1)
	if p.authFile != "" {
		stop := p.follow(ctx, changed)
		defer stop()
	}
	tick := time.NewTicker(p.init)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			refresh()
		case <-done:
			done = nil
			tick.Reset(p.period)
		case <-tick.C:
			if pokes && done != nil {
				p.initial.poke(p.trigger)
			}
			if p.auth != nil {
				refresh()
			}
		}
	}
}

// sameAuth reports whether a and b hold the same credentials.
func sameAuth(a, b *gitutil.Auth) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Username == b.Username && a.Password == b.Password && bytes.Equal(a.SSHPrivateKey, b.SSHPrivateKey) &&
		slices.EqualFunc(a.SSHPrivateKeys, b.SSHPrivateKeys, bytes.Equal) && bytes.Equal(a.KnownHosts, b.KnownHosts) &&
		a.InsecureIgnoreHostKey == b.InsecureIgnoreHostKey
}

// follow says on changed when authFile changes, until stop, which waits
// for its goroutine: a rotation is then used from the next poll on, not
// the next period (the file is read again at each period too).
func (p *repoSource) follow(ctx context.Context, changed chan<- struct{}) (stop func()) {
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(ctx)
	wg.Go(func() {
		err := filewatch.Watch(ctx, p.authFile, 10*time.Millisecond, p.log, func([]byte, error) {
			select {
			case changed <- struct{}{}:
			default:
			}
		})
		if err != nil && ctx.Err() == nil {
			p.log.Error(err, "--password-file is not followed; it is read again every period")
		}
	})
	return func() { cancel(); wg.Wait() }
}

// servers starts the push-hint and health endpoints that the flags ask
// for; stop closes them.
func (s *session) servers(ctx context.Context, reg *prometheus.Registry, w *watcher.Watcher, m *metrics.Metrics) (stop func(), err error) {
	var closers []func()
	stop = func() {
		for _, c := range closers {
			c()
		}
	}
	c := s.c
	if c.hookBind != "" {
		cfg, err := c.hookConfig()
		if err != nil {
			return stop, err
		}
		hooks, err := webhook.New(cfg, w)
		if err != nil {
			return stop, err
		}
		closers = append(closers, hooks.Close)
		mux := http.NewServeMux()
		mux.Handle("POST /hooks", hooks)
		srv, err := listenAndServe(logr.NewContext(ctx, s.log), c.hookBind, mux)
		if err != nil {
			return stop, err
		}
		closers = append(closers, func() { _ = srv.Close() })
	}
	if c.httpBind != "" {
		if err := m.CollectStats(w); err != nil {
			return stop, err
		}
		srv, err := serve(c.httpBind, reg, w, s.initialSynced, c.httpMetrics, c.httpPprof)
		if err != nil {
			return stop, err
		}
		closers = append(closers, func() { _ = srv.Close() })
	}
	return stop, nil
}

// pprofRoutes adds net/http/pprof's handlers (--http-pprof).
func pprofRoutes(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}

// setenv sets the process's variable k to v, and returns what puts back
// what it was.
func setenv(k, v string) (restore func()) {
	old, had := os.LookupEnv(k)
	_ = os.Setenv(k, v)
	return func() {
		if had {
			_ = os.Setenv(k, old)
		} else {
			_ = os.Unsetenv(k)
		}
	}
}
