//go:build !unix

package gitutil

const nonBlock = 0
