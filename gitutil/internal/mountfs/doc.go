// Package mountfs joins file systems at directories, as a checkout puts
// submodules into the superproject's tree ([Mount]), and holds the
// made-up files such a file system hands out: a directory listed ahead
// ([NewDir]) and a description built, not read ([NewInfo]), which the
// mirror's file system of a tree hands out too.
package mountfs
