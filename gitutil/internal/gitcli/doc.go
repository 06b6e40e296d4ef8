// Package gitcli holds what the mirror needs to run the git CLI: its
// environment, with the credentials of a fetch in it and in private
// files, never on its command line; the branch a clone starts from; and
// the tail of what a command writes on stderr, bounded.
package gitcli
