// Package handout hands on the trees of a delivery once the sink's call
// returned (mirror.Detach), Change.Root too, which may open later.
package handout
