//go:build !unix

package mirror

const nonBlock = 0
