//go:build unix

package gitutil

import (
	"os/exec"
	"syscall"
)

// killGroupOnCancel makes cmd the leader of a process group of its own and,
// when its context ends, kills the whole group: git leaves the transfer to
// a helper (git-remote-https, ssh) that would otherwise run on, holding
// its output open.
func killGroupOnCancel(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
