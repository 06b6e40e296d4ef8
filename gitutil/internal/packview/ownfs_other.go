//go:build !unix

package packview

const nonBlock = 0
