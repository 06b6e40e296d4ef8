// Command gitsync is a git-sync (v4) sidecar built on the library: git-sync's
// flags and GITSYNC_* (and v3's GIT_SYNC_*) variables with their meaning,
// and its contract — root is a git repository, each synced commit a git
// worktree at root/.worktrees/<hash> (--depth commits of history, its
// submodules checked out, sparse with --sparse-checkout-file), and the link
// a relative symlink to it swapped atomically; the exechook runs in it with
// GITSYNC_HASH and the webhook sends Gitsync-Hash, each on its own with
// retries; git-sync's metrics beside the library's. What differs is in
// docs/migrating.md. What it adds: --path publishes one directory of the
// repository and syncs only when something under it changed; --also syncs
// more repositories or paths in the same process (one poll per remote);
// --hook-bind takes push webhooks (GitHub's, GitLab's, Gitea's, Gogs',
// Bitbucket's, or a generic HMAC-signed one) and syncs at once;
// --commit-file writes the commit into each tree.
//
//	go run ./examples/gitsync --repo https://github.com/stefanprodan/podinfo --root /tmp/git --link podinfo --period 30s
//
// Flags, and GITSYNC_ or GIT_SYNC_ variables, this program does not take
// fail at start, by name (the GitHub App flags, among git-sync's; a
// --cookie-file set is refused by name too).
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sys/unix"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/mirror"
	"github.com/modwatch/modwatch/source/webhook"
	"github.com/modwatch/modwatch/watcher"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == credentialHelperArg {
		os.Exit(credentialHelper(os.Args[2:], os.Stdin, os.Stdout, os.Getenv(credentialsEnv)))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(runIO(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}

// config is git-sync's flags that this program honours.
type config struct {
	repo, ref, root, link, path                   string
	period, initPeriod, syncTimeout               time.Duration
	staleWorktreeTimeout                          time.Duration
	depth, maxFailures, initMaxFailures, verbose  int
	depthSet, initMaxFailuresSet                  bool
	oneTime, addUser, groupWrite                  bool
	httpMetrics, httpPprof                        bool
	exechookCommand, prePublishCommand            string
	exechookTimeout, exechookBackoff              time.Duration
	prePublishTimeout, prePublishBackoff          time.Duration
	webhookURL, webhookMethod                     string
	webhookStatus                                 int
	webhookTimeout, webhookBackoff                time.Duration
	username, passwordFile, knownHosts            string
	sshKeyFiles                                   []string // repeatable, tried in turn (ssh -i each)
	sshKnownHosts                                 bool     // check host keys against knownHosts
	cookieFile                                    bool     // refused when set: see check
	githubBaseURL                                 string   // taken: GitHub App auth only, which is refused
	version, manual, help                         bool     // print and exit
	logFormat                                     string   // json, as git-sync\'s, or text
	password                                      string   // GITSYNC_PASSWORD: never a flag, as git-sync
	httpBind, cacheDir, errorFile, syncOnSignal   string
	commitFile, hookBind, touchFile               string
	hookSecretFile, hookGitHubSecretFile          string
	hookGitLabTokenFile, hookGiteaSecretFile      string
	hookGogsSecretFile, hookBitbucketSecretFile   string
	gitBin, gitGC, submodules, sparseFile, filter string
	gitConfigs                                    []string // key=value, from --git-config and --git-config-add
	signal                                        os.Signal
	also                                          []watcher.Target
	credentials                                   []credential
	askpassURL                                    string
	v3                                            v3
	notes                                         []string // said at start
}

// gitConfigFlag is --git-config-add: one key:value each time, parsed as
// --git-config's list.
type gitConfigFlag struct{ into *[]string }

func (g gitConfigFlag) String() string { return "" }

func (g gitConfigFlag) Set(v string) error {
	kvs, err := parseGitConfigs(v)
	if err != nil {
		return err
	}
	*g.into = append(*g.into, kvs...)
	return nil
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
	var c config
	fs := c.flags(stderr)
	// A variable is a default: the command line wins.
	var envErr error
	known := map[string]bool{"GITSYNC_PASSWORD": true, "GIT_SYNC_PASSWORD": true}
	fs.VisitAll(func(f *flag.Flag) {
		// git-sync's name, then its older names: the last set wins, as
		// in git-sync.
		names := append([]string{"GITSYNC_" + envName(f.Name), "GIT_SYNC_" + envName(f.Name)}, v3Env[f.Name]...)
		from := ""
		for _, name := range names {
			known[name] = true
			if vars[name] != "" {
				from = name
			}
		}
		if from != "" && envErr == nil {
			if err := setFromEnv(f.Value, vars[from]); err != nil {
				envErr = fmt.Errorf("%s=%q: %w", from, vars[from], err)
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
	c.password = cmp.Or(vars["GITSYNC_PASSWORD"], vars["GIT_SYNC_PASSWORD"])
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.version || c.manual || c.help {
		return c, nil // printed, before any check, as git-sync's
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	c.depthSet = set["depth"] || vars["GITSYNC_DEPTH"] != ""
	c.initMaxFailuresSet = set["init-max-failures"] || vars["GITSYNC_INIT_MAX_FAILURES"] != ""
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	return c, c.check()
}

// flags defines the command's flags into c, with git-sync's defaults.
func (c *config) flags(stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("gitsync", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.repo, "repo", "", "the git repository to sync (required)")
	fs.StringVar(&c.ref, "ref", "HEAD", "the git revision (branch, tag, or hash) to sync")
	fs.IntVar(&c.depth, "depth", 1, "the number of commits of history to fetch and keep (0: all), as git-sync's")
	fs.StringVar(&c.submodules, "submodules", "recursive", "git submodules: recursive, shallow (one level) or off")
	fs.StringVar(&c.sparseFile, "sparse-checkout-file", "", "the path to a git sparse-checkout file")
	fs.StringVar(&c.filter, "filter", "", "a git partial-clone filter (blob:none, or blob:limit=<n>[kmg]) of the repository's fetches: the files a worktree checks out are fetched as git reads them")
	fs.StringVar(&c.root, "root", "", "the root directory for git-sync operations (required)")
	fs.StringVar(&c.link, "link", "", "the path (absolute or relative to --root) at which to create a symlink to the synced worktree (default: the repository's name)")
	fs.StringVar(&c.path, "path", "", "modwatch: publish only this directory of the repository, and sync only when it changed")
	fs.StringVar(&c.errorFile, "error-file", "", "the path (absolute or relative to --root) of a file the last sync error is written to (removed after a success)")
	fs.DurationVar(&c.initPeriod, "init-period", 0, "the period until the first successful sync (0: --period)")
	fs.DurationVar(&c.period, "period", 10*time.Second, "how long to wait between sync attempts")
	fs.DurationVar(&c.syncTimeout, "sync-timeout", 120*time.Second, "the total time allowed for one complete sync")
	fs.BoolVar(&c.oneTime, "one-time", false, "exit after the first sync")
	fs.StringVar(&c.syncOnSignal, "sync-on-signal", "", "sync on receipt of this signal (a name, as HUP or SIGHUP, or a number)")
	fs.IntVar(&c.maxFailures, "max-failures", 0, "the number of consecutive failures allowed before aborting (-1: no limit)")
	fs.IntVar(&c.initMaxFailures, "init-max-failures", 0, "--max-failures until the first successful sync (default: --max-failures)")
	fs.StringVar(&c.touchFile, "touch-file", "", "a file to touch (create, or update its times) after each sync that published a new commit (absolute or relative to --root)")
	fs.BoolVar(&c.addUser, "add-user", false, "add a record to /etc/passwd for the current UID/GID (ssh, which git runs for SSH repositories, needs one); when /etc/passwd cannot be written, that is said and the sync goes on")
	fs.BoolVar(&c.groupWrite, "group-write", false, "make files group-writable (umask 002)")
	fs.DurationVar(&c.staleWorktreeTimeout, "stale-worktree-timeout", 0, "how long to retain non-current worktrees")
	c.hookFlags(fs)
	fs.StringVar(&c.username, "username", "", "the username to use for git auth")
	fs.StringVar(&c.passwordFile, "password-file", "", "the file from which the password or personal access token for git auth will be sourced")
	c.sshKeyFiles = []string{defaultSSHKeyFile}
	fs.Var(&listFlag{into: &c.sshKeyFiles}, "ssh-key-file", "the SSH key(s) to use, tried in turn (repeatable; a variable separates them with ':')")
	fs.BoolVar(&c.sshKnownHosts, "ssh-known-hosts", true, "enable SSH known_hosts verification")
	fs.StringVar(&c.knownHosts, "ssh-known-hosts-file", defaultKnownHostsFile, "the known_hosts file to use")
	fs.BoolVar(&c.cookieFile, "cookie-file", false, "git-sync's git cookie file (/etc/git-secret/cookie_file): refused when set, by name")
	fs.StringVar(&c.githubBaseURL, "github-base-url", "https://api.github.com/", "the GitHub base URL of GitHub App auth (which this program refuses): taken, and said at start when set")
	fs.Var(credentialsFlag{&c.credentials}, "credential", `a credential of the repository or its submodules, as JSON: {"url": "https://host/path", "username": "u", "password": "p" or "password-file": "/path"} (repeatable)`)
	fs.StringVar(&c.askpassURL, "askpass-url", "", "a URL to query for git credentials (username=<value> and password=<value> lines) before each sync")
	fs.StringVar(&c.gitBin, "git", "git", "the git command to run (subject to PATH search)")
	fs.Func("git-config", "additional git config options in a comma-separated 'key:val' format", func(v string) error {
		kvs, err := parseGitConfigs(v)
		c.gitConfigs = append(c.gitConfigs, kvs...)
		return err
	})
	fs.Var(gitConfigFlag{&c.gitConfigs}, "git-config-add", "an additional git config option in 'key:val' format (repeatable)")
	fs.StringVar(&c.gitGC, "git-gc", "always", "git garbage collection after worktrees are removed: auto, always, aggressive or off")
	fs.StringVar(&c.httpBind, "http-bind", "", "the bind address (including port) for the HTTP endpoint: / (health)")
	fs.BoolVar(&c.httpMetrics, "http-metrics", false, "enable metrics on the HTTP endpoint (/metrics)")
	fs.BoolVar(&c.httpPprof, "http-pprof", false, "enable the pprof debug endpoints on the HTTP endpoint (/debug/pprof/)")
	fs.IntVar(&c.verbose, "verbose", 0, "logs at this V level and lower will be printed")
	fs.IntVar(&c.verbose, "v", 0, "logs at this V level and lower will be printed (as --verbose)")
	fs.StringVar(&c.logFormat, "log-format", "json", "modwatch: the logs' format: json (lines as git-sync writes them) or text (key=value)")
	fs.BoolVar(&c.version, "version", false, "print the version and exit")
	fs.BoolVar(&c.manual, "man", false, "print the full manual and exit")
	for _, name := range []string{"help", "h", "?"} {
		fs.BoolVar(&c.help, name, false, "print help text and exit")
	}
	c.v3Flags(fs)
	fs.StringVar(&c.cacheDir, "cache-dir", "", "modwatch: where the mirror lives (default: root/.mirrors)")
	fs.StringVar(&c.commitFile, "commit-file", "", "modwatch: write the synced commit into this file at the top of each tree")
	fs.Var(alsoFlag{&c.also}, "also", "modwatch: also sync link=NAME,repo=URL[,ref=REF][,path=DIR] under --root (repeatable)")
	fs.StringVar(&c.hookBind, "hook-bind", "", "modwatch: take push webhooks on this address (POST /hooks) and sync at once")
	fs.StringVar(&c.hookSecretFile, "hook-secret-file", "", "modwatch: the secret of generic webhooks (X-Signature: sha256=HMAC)")
	fs.StringVar(&c.hookGitHubSecretFile, "hook-github-secret-file", "", "modwatch: the secret of GitHub webhooks")
	fs.StringVar(&c.hookGitLabTokenFile, "hook-gitlab-token-file", "", "modwatch: the token of GitLab webhooks")
	fs.StringVar(&c.hookGiteaSecretFile, "hook-gitea-secret-file", "", "modwatch: the secret of Gitea and Forgejo webhooks")
	fs.StringVar(&c.hookGogsSecretFile, "hook-gogs-secret-file", "", "modwatch: the secret of Gogs webhooks")
	fs.StringVar(&c.hookBitbucketSecretFile, "hook-bitbucket-secret-file", "", "modwatch: the secret of Bitbucket webhooks")
	return fs
}

// envName is the variable's name of a flag, after its prefix.
func envName(flagName string) string { return strings.ToUpper(strings.ReplaceAll(flagName, "-", "_")) }

// v3Env are the variables git-sync v4 takes for a flag beside
// GITSYNC_<FLAG> and GIT_SYNC_<FLAG>: v3's names, in git-sync's order.
var v3Env = map[string][]string{
	"sync-hook-command": {"GIT_SYNC_HOOK_COMMAND"}, "change-permissions": {"GIT_SYNC_PERMISSIONS"}, "askpass-url": {"GIT_ASKPASS_URL"},
	"ssh-key-file": {"GIT_SSH_KEY_FILE"}, "ssh-known-hosts-file": {"GIT_SSH_KNOWN_HOSTS_FILE"},
	"ssh-known-hosts": {"GIT_SYNC_KNOWN_HOSTS", "GIT_KNOWN_HOSTS"}, "cookie-file": {"GIT_COOKIE_FILE"},
}

// setFromEnv sets a flag from a variable: a list's items are separated
// by ':', as git-sync's.
func setFromEnv(v flag.Value, s string) error {
	if l, ok := v.(*listFlag); ok {
		*l.into = strings.Split(s, ":")
		return nil // a default: the command line's first replaces it
	}
	return v.Set(s)
}

// listFlag is a repeatable flag with a default: the first value given
// replaces the default, the next ones are added (pflag's StringArray).
type listFlag struct {
	into *[]string
	set  bool
}

func (l *listFlag) String() string {
	if l == nil || l.into == nil {
		return ""
	}
	return strings.Join(*l.into, ",")
}

func (l *listFlag) Set(v string) error {
	if !l.set {
		*l.into, l.set = nil, true
	}
	*l.into = append(*l.into, v)
	return nil
}

// v3 holds git-sync v3's spellings, which git-sync v4 still takes.
type v3 struct {
	branch, rev, dest, syncHookCommand, password string
	wait                                         float64
	timeout, maxSyncFailures, changePermissions  int
	ssh                                          bool
}

// v3Flags defines git-sync v3's spellings.
func (c *config) v3Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.v3.branch, "branch", "", "DEPRECATED: use --ref instead")
	fs.StringVar(&c.v3.rev, "rev", "", "DEPRECATED: use --ref instead")
	fs.StringVar(&c.v3.dest, "dest", "", "DEPRECATED: use --link instead")
	fs.Float64Var(&c.v3.wait, "wait", 0, "DEPRECATED: use --period instead (seconds)")
	fs.IntVar(&c.v3.timeout, "timeout", 0, "DEPRECATED: use --sync-timeout instead (seconds)")
	fs.IntVar(&c.v3.maxSyncFailures, "max-sync-failures", 0, "DEPRECATED: use --max-failures instead")
	fs.StringVar(&c.v3.syncHookCommand, "sync-hook-command", "", "DEPRECATED: use --exechook-command instead")
	fs.StringVar(&c.v3.password, "password", "", "DEPRECATED: use --password-file or $GITSYNC_PASSWORD instead")
	fs.BoolVar(&c.v3.ssh, "ssh", false, "DEPRECATED: this flag is no longer necessary")
	fs.IntVar(&c.v3.changePermissions, "change-permissions", 0, "DEPRECATED: refused, as git-sync v4 refuses it: use --group-write instead")
}

// fromV3 applies git-sync v3's spellings as git-sync v4 does, and notes
// each it used (logged at start).
func (c *config) fromV3() error {
	v := c.v3
	note := func(s string) { c.notes = append(c.notes, s) }
	switch {
	case v.branch != "" && v.rev != "" && v.rev != "HEAD":
		return errors.New("deprecated flag combo: can't set --ref from deprecated --branch and --rev (one or the other is OK)")
	case v.branch != "":
		c.ref = v.branch
		note("setting --ref from deprecated --branch")
	case v.rev != "":
		c.ref = v.rev
		note("setting --ref from deprecated --rev")
	}
	if v.changePermissions != 0 {
		return errors.New("deprecated flag: --change-permissions is no longer supported")
	}
	for _, d := range []struct {
		set  bool
		do   func()
		what string
	}{
		{v.dest != "", func() { c.link = v.dest }, "setting --link from deprecated --dest"},
		{v.wait != 0, func() { c.period = time.Duration(v.wait * float64(time.Second)) }, "setting --period from deprecated --wait"},
		{v.timeout != 0, func() { c.syncTimeout = time.Duration(v.timeout) * time.Second }, "setting --sync-timeout from deprecated --timeout"},
		{v.maxSyncFailures != 0, func() { c.maxFailures = v.maxSyncFailures }, "setting --max-failures from deprecated --max-sync-failures"},
		{v.syncHookCommand != "", func() { c.exechookCommand = v.syncHookCommand }, "setting --exechook-command from deprecated --sync-hook-command"},
		{v.password != "", func() { c.password = v.password }, "setting $GITSYNC_PASSWORD from deprecated --password"},
		{v.ssh, func() {}, "--ssh is deprecated and no longer necessary"},
	} {
		if d.set {
			d.do()
			note(d.what)
		}
	}
	return nil
}

// hookFlags are the exechooks' and the webhook's.
func (c *config) hookFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.exechookCommand, "exechook-command", "", "an optional command to be run when syncs complete (must be idempotent)")
	fs.DurationVar(&c.exechookTimeout, "exechook-timeout", 30*time.Second, "the timeout for the exechook")
	fs.DurationVar(&c.exechookBackoff, "exechook-backoff", 3*time.Second, "the time to wait before retrying a failed exechook")
	fs.StringVar(&c.prePublishCommand, "pre-publish-exechook-command", "", "an optional command to be run before a new worktree is published (must be idempotent)")
	fs.DurationVar(&c.prePublishTimeout, "pre-publish-exechook-timeout", 30*time.Second, "the timeout for the pre-publish-exechook")
	fs.DurationVar(&c.prePublishBackoff, "pre-publish-exechook-backoff", 3*time.Second, "the time to wait before retrying a failed pre-publish-exechook")
	fs.StringVar(&c.webhookURL, "webhook-url", "", "a URL for optional webhook notifications when syncs complete (must be idempotent)")
	fs.StringVar(&c.webhookMethod, "webhook-method", "POST", "the HTTP method for the webhook")
	fs.IntVar(&c.webhookStatus, "webhook-success-status", 200, "the HTTP status code indicating a successful webhook (0 disables success checks)")
	fs.DurationVar(&c.webhookTimeout, "webhook-timeout", time.Second, "the timeout for the webhook")
	fs.DurationVar(&c.webhookBackoff, "webhook-backoff", 3*time.Second, "the time to wait before retrying a failed webhook")
}

// check validates c and fills in what is derived (the link, the cache,
// the signal), as git-sync does at start.
func (c *config) check() error {
	if err := c.fromV3(); err != nil {
		return err
	}
	switch {
	case c.repo == "":
		return errors.New("--repo (or GITSYNC_REPO) is required")
	case c.root == "":
		return errors.New("--root (or GITSYNC_ROOT) is required")
	case c.period < 10*time.Millisecond || c.initPeriod < 0 || (c.initPeriod > 0 && c.initPeriod < 10*time.Millisecond):
		return errors.New("--period (and --init-period, when set) must be at least 10ms")
	case c.syncTimeout < 10*time.Millisecond:
		return errors.New("--sync-timeout must be at least 10ms")
	case c.httpBind == "" && (c.httpMetrics || c.httpPprof):
		return errors.New("--http-bind must be specified when --http-metrics or --http-pprof is set")
	case c.username != "" && c.password == "" && c.passwordFile == "":
		return errors.New("$GITSYNC_PASSWORD or --password-file must be specified when --username is specified")
	case c.username == "" && (c.password != "" || c.passwordFile != ""):
		return errors.New("$GITSYNC_PASSWORD and --password-file may only be specified when --username is specified")
	case !slices.Contains([]string{"recursive", "shallow", "off"}, c.submodules):
		return fmt.Errorf("--submodules must be one of recursive, shallow, off: %q", c.submodules)
	case !slices.Contains([]string{"auto", "always", "aggressive", "off"}, c.gitGC):
		return fmt.Errorf("--git-gc must be one of auto, always, aggressive, off: %q", c.gitGC)
	case c.logFormat != "json" && c.logFormat != "text":
		return fmt.Errorf("--log-format must be json or text: %q", c.logFormat)
	case c.depth < 0:
		return errors.New("--depth must not be negative")
	case c.askpassURL != "" && (c.password != "" || c.passwordFile != ""):
		return errors.New("--askpass-url and --password-file or GITSYNC_PASSWORD are exclusive")
	case c.path != "" && c.sparseFile != "":
		return errors.New("--path and --sparse-checkout-file are exclusive: --path is a sparse checkout of its directory")
	}
	if err := c.checkTaken(); err != nil {
		return err
	}
	if c.filter != "" {
		if err := mirror.ValidFilter(c.filter); err != nil {
			return fmt.Errorf("--filter: %w", err)
		}
		if c.alsoOfTheRepository() {
			// Their trees are the library's, which fetches files over
			// HTTP(S) only; the worktree's are git's, over any transport.
			return errors.New("--filter and an --also of the same repository are exclusive")
		}
	}
	if err := c.checkHooks(); err != nil {
		return err
	}
	if c.initPeriod == 0 {
		c.initPeriod = c.period
	}
	if err := c.urlCredentials(); err != nil {
		return err
	}
	if err := c.checkPaths(); err != nil {
		return err
	}
	if c.hookBind != "" && c.hookSecretFile == "" && c.hookGitHubSecretFile == "" && c.hookGitLabTokenFile == "" &&
		c.hookGiteaSecretFile == "" && c.hookGogsSecretFile == "" && c.hookBitbucketSecretFile == "" {
		return errors.New("--hook-bind needs a --hook-*-secret-file (or --hook-gitlab-token-file): unsigned webhooks are refused")
	}
	if c.syncOnSignal != "" {
		var err error
		if c.signal, err = parseSignal(c.syncOnSignal); err != nil {
			return err
		}
	}
	return nil
}

// checkTaken refuses, by name, git-sync's settings this program takes but
// cannot honour, and notes those it takes and does nothing with.
func (c *config) checkTaken() error {
	if c.cookieFile {
		return errors.New("--cookie-file (GITSYNC_COOKIE_FILE, GIT_COOKIE_FILE) is not supported: this program's HTTP fetches send no cookies")
	}
	if c.githubBaseURL != "https://api.github.com/" {
		c.notes = append(c.notes, "--github-base-url is used by GitHub App auth only, which this program does not take: not used")
	}
	c.checkSSH()
	return nil
}

// checkPaths makes --root and --link absolute (the link under root unless
// absolute), and refuses links that would name root or a worktree.
func (c *config) checkPaths() error {
	root, err := filepath.Abs(c.root)
	if err != nil {
		return err
	}
	c.root = root
	if c.link == "" {
		c.link = path.Base(strings.Trim(c.repo, "/")) // git-sync's: the URL's last element
	}
	c.link = absUnder(c.root, c.link)
	if c.link == c.root || strings.HasPrefix(c.link, filepath.Join(c.root, ".worktrees")+string(filepath.Separator)) {
		return fmt.Errorf("--link %q names --root or its worktrees", c.link)
	}
	if c.cacheDir == "" {
		c.cacheDir = filepath.Join(c.root, ".mirrors")
	}
	for _, t := range c.also {
		if filepath.Join(c.root, t.ID) == c.link || t.ID == "." || t.ID == ".." || strings.ContainsAny(t.ID, `/\`) {
			return fmt.Errorf("--also link=%q must name one entry of --root, not --link's", t.ID)
		}
	}
	return nil
}

// urlCredentials takes the user and password out of an http(s) --repo
// (git-sync passes such a URL to git, which sends them): the URL the
// watcher, the logs and the metrics see has none.
func (c *config) urlCredentials() error {
	u, err := url.Parse(c.repo)
	if err != nil || u.User == nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil // the watcher judges the URL
	}
	if c.username != "" || c.password != "" || c.passwordFile != "" {
		return errors.New("credentials in --repo and in --username, --password-file or GITSYNC_PASSWORD are exclusive")
	}
	c.username = u.User.Username()
	c.password, _ = u.User.Password()
	u.User = nil
	c.repo = u.String()
	return nil
}

// checkHooks refuses what git-sync refuses of the hooks' settings.
func (c *config) checkHooks() error {
	for _, h := range []struct {
		cmd, name        string
		timeout, backoff time.Duration
	}{
		{c.exechookCommand, "exechook", c.exechookTimeout, c.exechookBackoff},
		{c.prePublishCommand, "pre-publish-exechook", c.prePublishTimeout, c.prePublishBackoff},
		{c.webhookURL, "webhook", c.webhookTimeout, c.webhookBackoff},
	} {
		if h.cmd != "" && (h.timeout < time.Second || h.backoff < time.Second) {
			return fmt.Errorf("--%s-timeout and --%s-backoff must be at least 1s", h.name, h.name)
		}
	}
	if c.webhookStatus == -1 {
		c.webhookStatus = 0 // git-sync's old spelling of "no check"
	}
	if c.webhookStatus < 0 {
		return errors.New("--webhook-success-status must be a valid HTTP code or 0")
	}
	return nil
}

// parseSignal reads a signal as git-sync's --sync-on-signal: a number, a
// name (SIGHUP), or a name without its SIG prefix (HUP).
func parseSignal(s string) (os.Signal, error) {
	if n, err := strconv.ParseInt(s, 0, 0); err == nil {
		if n <= 0 || n >= 65 {
			return nil, fmt.Errorf("--sync-on-signal: no signal %d", n)
		}
		return syscall.Signal(n), nil
	}
	if sig := cmp.Or(unix.SignalNum(s), unix.SignalNum("SIG"+s)); sig != 0 {
		return sig, nil
	}
	return nil, fmt.Errorf("--sync-on-signal: unknown signal %q (a valid signal name or number)", s)
}

// hookConfig reads the webhook secrets.
func (c config) hookConfig() (webhook.Config, error) {
	var cfg webhook.Config
	for _, f := range []struct {
		path string
		into *string
	}{{c.hookSecretFile, &cfg.GenericSecret}, {c.hookGitHubSecretFile, &cfg.GitHubSecret}, {c.hookGitLabTokenFile, &cfg.GitLabToken},
		{c.hookGiteaSecretFile, &cfg.GiteaSecret}, {c.hookGogsSecretFile, &cfg.GogsSecret}, {c.hookBitbucketSecretFile, &cfg.BitbucketSecret}} {
		if f.path == "" {
			continue
		}
		data, err := readMounted(f.path)
		if err != nil {
			return cfg, err
		}
		*f.into = strings.TrimSpace(string(data))
	}
	return cfg, nil
}

// auth reads the credentials the flags (or --repo's URL) name; the
// --repo source reads them again every period, so that a --password-file
// rotated in place is used from the next poll on. Their ID keeps the
// mirror across a rotation.
func (c config) auth() (*gitutil.Auth, error) {
	a := &gitutil.Auth{ID: "gitsync", Username: c.username, Password: c.password, AllowInsecureHTTP: true}
	if c.passwordFile != "" && c.password != "" {
		return nil, errors.New("GITSYNC_PASSWORD and --password-file are exclusive")
	}
	if c.passwordFile != "" {
		pw, err := readMounted(c.passwordFile)
		if err != nil {
			return nil, fmt.Errorf("--password-file: %w", err)
		}
		a.Password = strings.TrimRight(string(pw), "\r\n")
	}
	if isSSH(c.repo) {
		if err := c.sshAuth(a); err != nil {
			return nil, err
		}
	}
	if a.Username == "" && a.Password == "" && a.SSHPrivateKey == nil {
		if u, err := url.Parse(c.repo); err == nil {
			if cred, ok := best(c.credentials, u.Scheme, u.Host, u.Path); ok {
				cred, err := cred.resolved()
				if err != nil {
					return nil, err
				}
				a.Username, a.Password = cred.Username, cred.Password
				return a, nil
			}
		}
		return nil, nil
	}
	return a, nil
}

// askpass asks --askpass-url for the repository's credentials, as git-sync
// does before each sync: a GET, answered 200 with username= and password=
// lines (within a second, and 64 KiB).
func (c config) askpass(ctx context.Context) (*gitutil.Auth, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.askpassURL, nil)
	if err != nil {
		return nil, fmt.Errorf("--askpass-url: %w", err)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("--askpass-url %s: %w", gitutil.RedactURL(c.askpassURL), errors.Unwrap(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("--askpass-url: reading the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("--askpass-url answered %s", resp.Status) // not its body: it may hold a secret
	}
	a := &gitutil.Auth{ID: "gitsync", AllowInsecureHTTP: true}
	for _, line := range strings.Split(string(body), "\n") {
		k, v, _ := strings.Cut(strings.TrimRight(line, "\r"), "=")
		switch k {
		case "username":
			a.Username = v
		case "password":
			a.Password = v
		}
	}
	return a, nil
}

// gitCredentials are the credentials git is given to fetch submodules:
// --credential's, then the repository's own, a (the target's as last
// delivered: --askpass-url's, the password file's as last read), for its
// host, as git-sync stores them.
func (c config) gitCredentials(a *gitutil.Auth) ([]credential, error) {
	var out []credential
	for _, cred := range c.credentials {
		r, err := cred.resolved()
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	if u, perr := url.Parse(c.repo); perr == nil && a != nil && a.Password != "" && (u.Scheme == "http" || u.Scheme == "https") {
		out = append(out, credential{URL: u.Scheme + "://" + u.Host, Username: a.Username, Password: a.Password})
	}
	return out, nil
}

// run is the program, its output (--version, --help, --man) on stderr
// with its logs.
func run(ctx context.Context, args []string, environ []string, stderr io.Writer) int {
	return runIO(ctx, args, environ, stderr, stderr)
}

// runIO is the program; it returns the exit code.
func runIO(ctx context.Context, args []string, environ []string, stdout, stderr io.Writer) int {
	c, err := parse(args, environ, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "gitsync:", err)
		return 2
	}
	if c.version || c.manual || c.help {
		printInfo(stdout, c)
		return 0
	}
	log := newLogger(c.logFormat, c.verbose, stderr)
	if err := syncRepo(ctx, c, log); err != nil {
		log.Error(err, "gitsync failed")
		return 1
	}
	return 0
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
// failing), /metrics with --http-metrics and /debug/pprof/ with
// --http-pprof.
func serve(addr string, reg *prometheus.Registry, w *watcher.Watcher, synced func() bool, withMetrics, withPprof bool) (*http.Server, error) {
	mux := http.NewServeMux()
	if withMetrics {
		// promhttp_metric_handler_* too, as git-sync's promhttp.Handler.
		mux.Handle("GET /metrics", promhttp.InstrumentMetricHandler(reg, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	}
	if withPprof {
		pprofRoutes(mux)
	}
	mux.HandleFunc("GET /{$}", func(rw http.ResponseWriter, _ *http.Request) {
		if st := w.Stats(); !synced() || !st.Synced || st.Failing > 0 || st.Invalid > 0 {
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
