// Package configmap is a source that reads the control repositories from a
// file mounted from a ConfigMap (Numaplane's agent configuration), and
// follows the file as it changes.
//
// The file's directory is watched with fsnotify, which sees every way the
// file is replaced: the kubelet's atomic update of a mounted ConfigMap (a
// new timestamped directory, then the ..data symlink swapped), an editor's
// write-and-rename, a plain write. Events are debounced, and the file is
// parsed again only when its content changed.
//
// A file that cannot be parsed, templated or validated keeps the last good
// targets in place and is reported; the source never hands the watcher an
// empty set because of a bad file. Nor because of a missing one: a file
// that disappears keeps the last good targets for a grace (five minutes by
// default, [WithMissingGrace]), so a volume that blinks does not make every
// sink remove, then re-create, what it applied; only a file gone for the
// whole grace, or one that says "gitDefinitions: []", removes them, and
// that is logged as an error.
//
// The file is read strictly (see [Load]): a key the package does not
// implement is an error naming it, unless the program reads it itself
// ([WithOwnKeys]). A keyValueGenerator.reference's files are read from git
// ([WithValues], [GitValues]) at each change and every minute, and the
// credentials the file names are handed to the program ([WithCredentials]).
package configmap
