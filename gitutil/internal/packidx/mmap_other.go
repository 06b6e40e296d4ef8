//go:build !unix

package packidx

import (
	"io"
	"os"
)

// mapFile reads size bytes of f (where the system has no mmap that this
// package uses).
func mapFile(f *os.File, size int) (data []byte, unmap func() error, err error) {
	data = make([]byte, size)
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, nil, err
	}
	return data, func() error { return nil }, nil
}
