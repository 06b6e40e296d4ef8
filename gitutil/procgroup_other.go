//go:build !unix

package gitutil

import "os/exec"

// killGroupOnCancel kills the process itself (see the unix version).
func killGroupOnCancel(*exec.Cmd) {}
