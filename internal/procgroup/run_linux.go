package procgroup

import (
	"context"
	"errors"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// Run starts cmd as the leader of a process group of its own and waits
// for it to exit. When ctx ends first, the group is killed (SIGKILL: a
// run past its end gets no grace), and cmd itself should it have left the
// group. When cmd exits, whatever of its group still runs is killed
// before cmd is reaped, so that the group's ID is still its own and never
// another's that took the number. Success is cmd's own exit status,
// whatever it left behind. A process that made a group or session of its
// own (setsid) is out of reach.
//
// cmd must not be started, nor made with exec.CommandContext: Run watches
// ctx. Give it files for its output (see [Output]): a pipe that a process
// out of reach keeps open would hold Wait until cmd.WaitDelay. The error
// is cmd.Wait's, Start's, or ctx's when it ended before the start.
func Run(ctx context.Context, cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid, cmd.SysProcAttr.Pgid = true, 0
	if err := ctx.Err(); err != nil {
		return err // as exec.CommandContext: not started at all
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	pid := cmd.Process.Pid
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		waitExited(pid)
	}()
	select {
	case <-exited:
	case <-ctx.Done():
		// The group at once, not only once the leader is gone (which
		// a leader in an uninterruptible wait may take long to be).
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = cmd.Process.Kill()
		<-exited
	}
	// The leader is a zombie until Wait: its ID, the group's, is not
	// given to another process.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	return cmd.Wait()
}

// waitExited returns when the process pid, a child, has exited, without
// reaping it (WNOWAIT), or when it cannot be waited for.
func waitExited(pid int) {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
}
