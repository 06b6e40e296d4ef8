//go:build unix

package packview

import "syscall"

// nonBlock opens a file that turned into a named pipe between the check
// and the open without waiting for a writer.
const nonBlock = syscall.O_NONBLOCK
