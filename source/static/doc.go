// Package static is a watcher.Source with a fixed list of targets, given in
// code or loaded from a YAML file.
package static
