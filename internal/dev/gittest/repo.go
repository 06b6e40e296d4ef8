package gittest

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Repo is a bare repository served by a [Server], with a work tree that
// commits are made in and pushed from.
type Repo struct {
	srv  *Server
	name string // "group/app.git"
	bare string
	work string // "" until a fork's first use: see [Repo.workTree]
	mu   sync.Mutex
}

// NewRepo creates an empty bare repository at name (".git" is appended when
// missing) whose default branch is main.
func (s *Server) NewRepo(t TB, name string) *Repo {
	t.Helper()
	if !strings.HasSuffix(name, ".git") {
		name += ".git"
	}
	r := &Repo{srv: s, name: name, bare: filepath.Join(s.root, name), work: t.TempDir()}
	r.git(t, "", "init", "-q", "--bare", "-b", "main", r.bare)
	r.git(t, r.work, "init", "-q", "-b", "main")
	r.git(t, r.work, "remote", "add", "origin", r.bare)
	return r
}

// Fork serves a copy of the repository at name (".git" is appended when
// missing), as it is now: its objects are hard links to this repository's
// (git never changes an object file, it writes new ones), every other file a
// copy. It runs no git (fleet's 10,000 remotes took about a minute as
// forks, 38 made one by one); the fork's work tree is cloned from it when
// it is first used.
func (r *Repo) Fork(t TB, name string) *Repo {
	t.Helper()
	if !strings.HasSuffix(name, ".git") {
		name += ".git"
	}
	f := &Repo{srv: r.srv, name: name, bare: filepath.Join(r.srv.root, name)}
	if _, err := os.Lstat(f.bare); !os.IsNotExist(err) {
		t.Fatalf("gittest: fork %s: %s exists", r.name, name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	err := filepath.WalkDir(r.bare, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(r.bare, p)
		if err != nil {
			return err
		}
		to := filepath.Join(f.bare, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case !d.Type().IsRegular():
			return fmt.Errorf("%s is not a regular file", p)
		case rel == "objects" || strings.HasPrefix(rel, "objects"+string(filepath.Separator)):
			return os.Link(p, to)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
	if err != nil {
		t.Fatalf("gittest: fork %s as %s: %v", r.name, name, err)
	}
	return f
}

// workTree is the repository's work tree; a fork's is cloned from it on
// first use. r.mu is held.
func (r *Repo) workTree(t TB) string {
	t.Helper()
	if r.work == "" {
		work := t.TempDir()
		r.git(t, "", "clone", "-q", r.bare, work)
		r.work = work
	}
	return r.work
}

// URL is the repository's clone URL on the server.
func (r *Repo) URL() string { return r.srv.URL() + "/" + r.name }

// Name is the repository's path on the server ("group/app.git").
func (r *Repo) Name() string { return r.name }

// Counts are the requests this repository received.
func (r *Repo) Counts() *Counts { return r.srv.Counts(r.name) }

// BareDir is the served bare repository.
func (r *Repo) BareDir() string { return r.bare }

// A Change edits the work tree before a commit.
type Change func(t TB, work string)

// File writes a file (creating directories).
func File(path, content string) Change {
	return func(t TB, work string) {
		t.Helper()
		p := filepath.Join(work, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatalf("gittest: %v", err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatalf("gittest: %v", err)
		}
	}
}

// Numbered is n files, the i-th at name(i) holding i in decimal: a wide
// tree in one call.
func Numbered(n int, name func(i int) string) []Change {
	files := make([]Change, n)
	for i := range n {
		files[i] = File(name(i), strconv.Itoa(i))
	}
	return files
}

// Delete removes a file or directory.
func Delete(path string) Change {
	return func(t TB, work string) {
		t.Helper()
		if err := os.RemoveAll(filepath.Join(work, filepath.FromSlash(path))); err != nil {
			t.Fatalf("gittest: %v", err)
		}
	}
}

// Symlink creates a symbolic link at path pointing at target, verbatim.
func Symlink(path, target string) Change {
	return func(t TB, work string) {
		t.Helper()
		p := filepath.Join(work, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatalf("gittest: %v", err)
		}
		_ = os.Remove(p)
		if err := os.Symlink(target, p); err != nil {
			t.Fatalf("gittest: %v", err)
		}
	}
}

// Commit applies changes, commits them on the current branch and pushes it;
// it returns the new commit's SHA.
func (r *Repo) Commit(t TB, msg string, changes ...Change) string {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	work := r.workTree(t)
	for _, c := range changes {
		c(t, work)
	}
	r.git(t, work, "add", "-A")
	r.git(t, work, "commit", "-q", "--allow-empty", "-m", msg)
	r.git(t, work, "push", "-q", "--force", "origin", "HEAD")
	return r.git(t, work, "rev-parse", "HEAD")
}

// Checkout switches the work tree to branch, creating it from the current
// commit when it does not exist.
func (r *Repo) Checkout(t TB, branch string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.run(r.workTree(t), "rev-parse", "--verify", "-q", "refs/heads/"+branch); err != nil {
		r.git(t, r.workTree(t), "checkout", "-q", "-b", branch)
		return
	}
	r.git(t, r.workTree(t), "checkout", "-q", branch)
}

// Reset moves the current branch to commit and force-pushes it: a rewrite
// of history as a force-push makes it.
func (r *Repo) Reset(t TB, commit string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.git(t, r.workTree(t), "reset", "-q", "--hard", commit)
	r.git(t, r.workTree(t), "push", "-q", "--force", "origin", "HEAD")
}

// Tag creates a tag at the current commit and pushes it; annotated tags get
// a message.
func (r *Repo) Tag(t TB, name string, annotated bool) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if annotated {
		r.git(t, r.workTree(t), "tag", "-a", "-m", "tag "+name, name)
	} else {
		r.git(t, r.workTree(t), "tag", name)
	}
	r.git(t, r.workTree(t), "push", "-q", "--force", "origin", "refs/tags/"+name)
}

// DeleteRef deletes a branch or tag on the server.
func (r *Repo) DeleteRef(t TB, ref string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.git(t, r.workTree(t), "push", "-q", "origin", ":"+ref)
}

// Git runs a git command in the work tree and returns its trimmed output.
func (r *Repo) Git(t TB, args ...string) string {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.git(t, r.workTree(t), args...)
}

func (r *Repo) git(t TB, dir string, args ...string) string {
	t.Helper()
	out, err := r.run(dir, args...)
	if err != nil {
		t.Fatalf("gittest: git %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func (r *Repo) run(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = gitEnv(r.srv.root)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

// Submodule records a submodule at path, pinned at commit of url: a
// gitlink in the index and its .gitmodules entry, left unpopulated (an
// empty directory), as a clone without --recurse-submodules has it.
func Submodule(path, url, commit string) Change {
	return func(t TB, work string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(work, filepath.FromSlash(path)), 0o755); err != nil {
			t.Fatalf("gittest: %v", err)
		}
		f, err := os.OpenFile(filepath.Join(work, ".gitmodules"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatalf("gittest: %v", err)
		}
		_, err = fmt.Fprintf(f, "[submodule %q]\n\tpath = %s\n\turl = %s\n", path, path, url)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatalf("gittest: %v", err)
		}
		if out, err := exec.Command("git", "-C", work, "update-index", "--add", "--cacheinfo", "160000,"+commit+","+path).CombinedOutput(); err != nil {
			t.Fatalf("gittest: git update-index: %v: %s", err, out)
		}
	}
}

// Pin moves the submodule at path (recorded by [Submodule]) to commit.
func Pin(path, commit string) Change {
	return func(t TB, work string) {
		t.Helper()
		if out, err := exec.Command("git", "-C", work, "update-index", "--cacheinfo", "160000,"+commit+","+path).CombinedOutput(); err != nil {
			t.Fatalf("gittest: git update-index: %v: %s", err, out)
		}
	}
}

// DirBytes is what the regular files under dir take (a mirror's objects,
// a root), for tests of what a program keeps on disk.
func DirBytes(t TB, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err == nil {
			n += info.Size()
		}
		return err
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	return n
}
