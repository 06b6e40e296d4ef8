package hook

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/procgroup"
	"github.com/modwatch/modwatch/watcher"
)

// DefaultTimeout bounds one run of a hook.
const DefaultTimeout = time.Minute

// Exec runs a command for each change, with these variables added to its
// environment: MODWATCH_TARGET (the target ID), MODWATCH_URL (redacted),
// MODWATCH_PATH, MODWATCH_REF, MODWATCH_COMMIT, MODWATCH_FROM (empty on the
// first delivery) and MODWATCH_REASON. As a step of a [watcher.Chain] after
// a sink that published the tree (sink/dir), it also gets MODWATCH_TREE,
// the published directory, and runs in it unless [WithDir] says otherwise,
// as git-sync's exechook runs in the new worktree.
type Exec struct {
	name    string
	args    []string
	dir     string
	timeout time.Duration
	env     func(watcher.Change) []string
}

var (
	_ watcher.Sink  = (*Exec)(nil)
	_ watcher.Namer = (*Exec)(nil)
)

// ExecOption configures an Exec.
type ExecOption func(*Exec)

// WithDir sets the command's working directory (default: the process's).
func WithDir(dir string) ExecOption { return func(e *Exec) { e.dir = dir } }

// WithExecEnv adds the variables ("NAME=value") env makes of each change
// to the command's environment, after the MODWATCH_ ones: a program's own
// names for them, as git-sync's GITSYNC_HASH.
func WithExecEnv(env func(c watcher.Change) []string) ExecOption {
	return func(e *Exec) { e.env = env }
}

// WithExecTimeout bounds one run (default [DefaultTimeout]).
func WithExecTimeout(d time.Duration) ExecOption {
	return func(e *Exec) {
		if d > 0 {
			e.timeout = d
		}
	}
}

// Command returns a sink that runs name with args for each change.
//
// A run is the life of the hook's own process, as git-sync's exechook is
// one command: it runs in a process group of its own, and its exit status
// alone says whether it succeeded. When it exits, whatever it started
// that still runs in its group is killed (SIGKILL), children that hold
// its output or not, grandchildren too: a hook that must leave a process
// behind puts it in a session of its own (setsid) and gives it an output
// of its own. On the run's timeout, or when the delivery's context ends,
// the whole group is killed at once.
//
// A run's output (stdout and stderr) goes to a temporary file that has no
// name from the start (in os.TempDir, cut while it runs whenever it grows
// past 1 MiB), not to a pipe: a process that keeps it open holds up
// nothing. Its last 4 KiB are logged at V(1) to the logger of the
// delivery's context; those of a failed run are in its error. With no
// temporary directory to write to, the hook still runs, and its output is
// not kept. On Linux; elsewhere a timeout kills the hook's process only.
func Command(name string, args []string, opts ...ExecOption) *Exec {
	e := &Exec{name: name, args: args, timeout: DefaultTimeout}
	for _, o := range opts {
		o(e)
	}
	return e
}

// Name implements watcher.Namer.
func (e *Exec) Name() string { return "exec:" + e.name }

// maxOutput bounds the output kept for a log line or an error message.
const maxOutput = 4 << 10

// Deliver runs the command and waits for it.
func (e *Exec) Deliver(ctx context.Context, c watcher.Change) error {
	ctx, cancel := context.WithTimeoutCause(ctx, e.timeout, fmt.Errorf("timed out after %s", e.timeout))
	defer cancel()
	out, err := procgroup.NewOutput(maxOutput)
	if err != nil {
		return fmt.Errorf("hook: %s for %s at %s: %w", e.name, c.Target.ID, c.To, err)
	}
	defer out.Close()
	cmd := e.command(ctx, c)
	cmd.Stdout, cmd.Stderr = out.File(), out.File()
	err = procgroup.Run(ctx, cmd)
	if err == nil {
		logr.FromContextOrDiscard(ctx).V(1).Info("hook ran", "command", e.name, "target", c.Target.ID, "commit", c.To.String(), "output", out.Tail())
		return nil
	}
	if ctx.Err() != nil {
		// Killed for the timeout (its cause) or the delivery's end.
		err = context.Cause(ctx)
	}
	if msg := strings.TrimSpace(out.Tail()); msg != "" {
		return fmt.Errorf("hook: %s for %s at %s: %w: %s", e.name, c.Target.ID, c.To, err, msg)
	}
	return fmt.Errorf("hook: %s for %s at %s: %w", e.name, c.Target.ID, c.To, err)
}

// command is the command for c: in the tree a step before published, if
// any and no WithDir, with c in its environment.
func (e *Exec) command(ctx context.Context, c watcher.Change) *exec.Cmd {
	cmd := exec.Command(e.name, e.args...)
	cmd.Dir = e.dir
	var tree string
	for _, r := range watcher.StepReports(ctx) {
		if p, ok := r.(interface{ PublishedTree() string }); ok {
			tree = p.PublishedTree()
		}
	}
	if tree != "" && cmd.Dir == "" {
		cmd.Dir = tree
	}
	cmd.Env = append(os.Environ(),
		"MODWATCH_TARGET="+c.Target.ID,
		"MODWATCH_URL="+gitutil.RedactURL(c.Target.URL),
		"MODWATCH_PATH="+c.Target.Path,
		"MODWATCH_REF="+c.Ref,
		"MODWATCH_COMMIT="+c.To.String(),
		"MODWATCH_FROM="+commitText(c.From),
		"MODWATCH_REASON="+string(c.Reason),
		"MODWATCH_TREE="+tree,
	)
	if e.env != nil {
		cmd.Env = append(cmd.Env, e.env(c)...)
	}
	return cmd
}

// commitText is commit in hex, "" for the zero hash (a first delivery's
// From).
func commitText(commit gitutil.Hash) string {
	if commit.IsZero() {
		return ""
	}
	return commit.String()
}
