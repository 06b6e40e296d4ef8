//go:build !unix

package safefile

import "os"

// openFile opens path read-only. Without unix's named pipes nothing blocks
// in the open; a link swapped in after openKind's look is followed, and
// the type of what it names is checked on the descriptor.
func openFile(path string, _ Links) (*os.File, error) {
	return os.Open(path)
}

// OpenFlags are the flags this package adds to os.OpenFile's: none here.
func OpenFlags(Links) int { return 0 }
