//go:build !linux

package procgroup

import (
	"context"
	"os/exec"
)

// Run starts cmd and waits for it; when ctx ends first, cmd is killed.
// Only on Linux does it own a process group (see the Linux version):
// elsewhere, what cmd starts is not killed with it.
func Run(ctx context.Context, cmd *exec.Cmd) error {
	if err := ctx.Err(); err != nil {
		return err // as exec.CommandContext: not started at all
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			_ = cmd.Process.Kill()
		case <-done:
		}
	}()
	return cmd.Wait()
}
