// Package stall watches a fetch's progress: a fetch that stops making any
// gives up its slot, then is aborted.
package stall
