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
// A file that is missing, unreadable, or cannot be parsed, templated or
// validated is no set, never an empty one: the last good targets stay in
// place (none before the first good read, and then nothing is removed at
// start either), and the watcher is told why (watcher.NoSet), for as long
// as it lasts. A volume that blinks or remounts, a kubelet swap, an
// operator's mistake: none makes a sink remove, then re-create, what it
// applied. Only a file read successfully that says "gitDefinitions: []"
// removes every target, and that is logged.
//
// The file is read strictly (see [Load]): a key the package does not
// implement is an error naming it, unless the program reads it itself
// ([LoadOptions].OwnKeys). A keyValueGenerator.reference's files are read from git
// ([LoadOptions].Values, [GitValues]) at each change and every minute, and the
// credentials the file names are handed to the program ([LoadOptions].Credentials).
package configmap
