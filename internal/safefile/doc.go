// Package safefile opens the files the library reads from its own
// directories, and from those it is handed, as untrusted: a named pipe, a
// device, a socket or a directory where a file is expected is refused
// without blocking and without being read; a file larger than the caller's
// bound is refused after at most that many bytes and one more (a file's
// stated size is not trusted); a read honours its context between chunks;
// and a symbolic link is refused where none is expected ([NoFollow]) or
// followed where one is ([Follow]: Kubernetes mounts a Secret's or a
// ConfigMap's keys as links through ..data).
//
// Only the last element of a path is held to [NoFollow]: the directory a
// program hands the library may itself be reached through links (/var/run,
// macOS's /tmp, a volume's mount path), so the package does not use
// Linux's openat2 RESOLVE_NO_SYMLINKS, which would refuse those, and is
// missing on kernels before 5.6 and under some container runtimes' seccomp
// profiles. The file's type is read from the open descriptor (fstat), so a
// file swapped between a look and the open is judged as it was opened.
//
// A refusal is a *fs.PathError naming the path and wrapping [ErrRefused]
// and one of [ErrLink], [ErrNotRegular], [ErrNotDir] or [ErrTooLarge]; a
// missing file is one wrapping [fs.ErrNotExist], as from os.Open.
package safefile
