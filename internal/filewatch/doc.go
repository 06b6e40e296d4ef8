// Package filewatch follows a file that may be replaced in any way: the
// kubelet's update of a mounted ConfigMap, an editor's rename, a plain
// write. The configuration sources share it.
package filewatch
