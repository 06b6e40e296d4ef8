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
	work string
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
	for _, c := range changes {
		c(t, r.work)
	}
	r.git(t, r.work, "add", "-A")
	r.git(t, r.work, "commit", "-q", "--allow-empty", "-m", msg)
	r.git(t, r.work, "push", "-q", "--force", "origin", "HEAD")
	return r.git(t, r.work, "rev-parse", "HEAD")
}

// Checkout switches the work tree to branch, creating it from the current
// commit when it does not exist.
func (r *Repo) Checkout(t TB, branch string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.run(r.work, "rev-parse", "--verify", "-q", "refs/heads/"+branch); err != nil {
		r.git(t, r.work, "checkout", "-q", "-b", branch)
		return
	}
	r.git(t, r.work, "checkout", "-q", branch)
}

// Reset moves the current branch to commit and force-pushes it: a rewrite
// of history as a force-push makes it.
func (r *Repo) Reset(t TB, commit string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.git(t, r.work, "reset", "-q", "--hard", commit)
	r.git(t, r.work, "push", "-q", "--force", "origin", "HEAD")
}

// Tag creates a tag at the current commit and pushes it; annotated tags get
// a message.
func (r *Repo) Tag(t TB, name string, annotated bool) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if annotated {
		r.git(t, r.work, "tag", "-a", "-m", "tag "+name, name)
	} else {
		r.git(t, r.work, "tag", name)
	}
	r.git(t, r.work, "push", "-q", "--force", "origin", "refs/tags/"+name)
}

// DeleteRef deletes a branch or tag on the server.
func (r *Repo) DeleteRef(t TB, ref string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.git(t, r.work, "push", "-q", "origin", ":"+ref)
}

// Git runs a git command in the work tree and returns its trimmed output.
func (r *Repo) Git(t TB, args ...string) string {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.git(t, r.work, args...)
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
