package hook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"github.com/modwatch/modwatch/gitutil"
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

// Command returns a sink that runs name with args for each change. The
// output of a run (its last 4 KiB) is logged at V(1) to the logger of the
// delivery's context; that of a failed run is in its error.
func Command(name string, args []string, opts ...ExecOption) *Exec {
	e := &Exec{name: name, args: args, timeout: DefaultTimeout}
	for _, o := range opts {
		o(e)
	}
	return e
}

// Name implements watcher.Namer.
func (e *Exec) Name() string { return "exec:" + e.name }

// maxOutput bounds the output kept for an error message.
const maxOutput = 4 << 10

// Deliver runs the command and waits for it.
func (e *Exec) Deliver(ctx context.Context, c watcher.Change) error {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.name, e.args...)
	cmd.Dir = e.dir
	cmd.WaitDelay = 5 * time.Second
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
		"MODWATCH_COMMIT="+c.To,
		"MODWATCH_FROM="+c.From,
		"MODWATCH_REASON="+string(c.Reason),
		"MODWATCH_TREE="+tree,
	)
	if e.env != nil {
		cmd.Env = append(cmd.Env, e.env(c)...)
	}
	var out tailBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err == nil {
		logr.FromContextOrDiscard(ctx).V(1).Info("hook ran", "command", e.name, "target", c.Target.ID, "commit", c.To, "output", out.String())
		return nil
	}
	if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("timed out after %s", e.timeout)
	}
	msg := strings.TrimSpace(out.String())
	if msg != "" {
		return fmt.Errorf("hook: %s for %s at %s: %w: %s", e.name, c.Target.ID, c.To, err, msg)
	}
	return fmt.Errorf("hook: %s for %s at %s: %w", e.name, c.Target.ID, c.To, err)
}

// tailBuffer keeps the last maxOutput bytes written to it.
type tailBuffer struct{ b bytes.Buffer }

func (t *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	t.b.Write(p)
	if over := t.b.Len() - maxOutput; over > 0 {
		t.b.Next(over)
	}
	return n, nil
}

func (t *tailBuffer) String() string { return t.b.String() }
