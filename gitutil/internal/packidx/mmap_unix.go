//go:build unix

package packidx

import (
	"os"
	"syscall"
)

// mapFile maps size bytes of f read-only into memory: pages are read when
// touched, and count towards the resident set only then. The mapping
// outlives f; unmap ends it.
func mapFile(f *os.File, size int) (data []byte, unmap func() error, err error) {
	data, err = syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, &os.PathError{Op: "mmap", Path: f.Name(), Err: err}
	}
	return data, func() error { return syscall.Munmap(data) }, nil
}
