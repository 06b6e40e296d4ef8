//go:build unix

package safefile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// openFile opens path read-only, close-on-exec (os.OpenFile's own),
// without waiting for a named pipe's writer (O_NONBLOCK, which a regular
// file ignores), without taking a terminal for the process's, and, unless
// links is Follow, refusing a link as the last element (OpenFlags).
func openFile(path string, links Links) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|OpenFlags(links), 0)
	if links != Follow && errors.Is(err, syscall.ELOOP) {
		// A link swapped in after the look (Linux, macOS; the BSDs say
		// EMLINK or EFTYPE, an error all the same).
		return nil, &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w (%s)", ErrLink, kind(fs.ModeSymlink))}
	}
	return f, err
}

// OpenFlags are the flags this package adds to os.OpenFile's for a file
// opened elsewhere (a lock file a library opens through another
// package): O_NONBLOCK and O_NOCTTY, and O_NOFOLLOW unless links is
// Follow. Its type is still to be checked on the descriptor.
func OpenFlags(links Links) int {
	flag := syscall.O_NONBLOCK | syscall.O_NOCTTY
	if links != Follow {
		flag |= syscall.O_NOFOLLOW
	}
	return flag
}
