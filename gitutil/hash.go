package gitutil

import (
	"encoding/hex"
	"errors"
	"fmt"
)

// Hash names a git object (a commit, a tree, a blob or an annotated tag)
// by its SHA-1. It is this library's own type, the one the watcher's seam
// over git speaks, so that what implements the seam need not be go-git.
// The zero Hash names nothing.
type Hash [20]byte

// ZeroHash is the Hash that names nothing.
var ZeroHash Hash

// ErrInvalidHash is returned (wrapped) by ParseHash for a string that is
// not 40 hexadecimal digits.
var ErrInvalidHash = errors.New("gitutil: invalid object name")

// ParseHash parses a full object name: 40 hexadecimal digits, in either
// case. An abbreviated name is refused (it needs a repository to resolve).
func ParseHash(s string) (Hash, error) {
	var h Hash
	if len(s) != 2*len(h) {
		return ZeroHash, fmt.Errorf("%w: %q is not 40 hexadecimal digits", ErrInvalidHash, truncate(s, 64))
	}
	if _, err := hex.Decode(h[:], []byte(s)); err != nil {
		return ZeroHash, fmt.Errorf("%w: %q is not 40 hexadecimal digits", ErrInvalidHash, s)
	}
	return h, nil
}

// String returns the name in 40 lower-case hexadecimal digits.
func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// IsZero reports whether h is the zero Hash.
func (h Hash) IsZero() bool { return h == ZeroHash }
