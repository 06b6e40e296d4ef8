package gittest

import (
	"os/exec"
	"strings"
	"testing"
)

// lsRemote is what git ls-remote says of ref at url, over the server.
func lsRemote(t *testing.T, url, ref string) string {
	t.Helper()
	out, err := exec.Command("git", "ls-remote", url, ref).Output()
	if err != nil {
		t.Fatalf("git ls-remote %s: %v", url, err)
	}
	sha, _, _ := strings.Cut(string(out), "\t")
	return sha
}

func TestForkIsServedAndGoesItsOwnWay(t *testing.T) {
	srv := NewServer(t)
	r := srv.NewRepo(t, "team/app")
	first := r.Commit(t, "init", File("app/cm.yaml", "v1"))
	f := r.Fork(t, "team/fork")
	if got := lsRemote(t, f.URL(), "refs/heads/main"); got != first {
		t.Fatalf("the fork serves main at %q, want %s", got, first)
	}
	second := f.Commit(t, "two", File("app/cm.yaml", "v2"))
	if got := f.Git(t, "show", "HEAD:app/cm.yaml"); got != "v2" {
		t.Fatalf("the fork's work tree has %q", got)
	}
	if got := lsRemote(t, f.URL(), "refs/heads/main"); got != second {
		t.Fatalf("the fork serves main at %q after its commit, want %s", got, second)
	}
	if got := lsRemote(t, r.URL(), "refs/heads/main"); got != first {
		t.Fatalf("a commit to the fork moved the original's main to %q, want %s", got, first)
	}
	if third := r.Commit(t, "three", File("app/cm.yaml", "v3")); lsRemote(t, f.URL(), "refs/heads/main") != second || third == second {
		t.Fatal("a commit to the original moved the fork's main")
	}
	if out, err := exec.Command("git", "-C", r.BareDir(), "fsck", "--strict").CombinedOutput(); err != nil {
		t.Fatalf("the original after its fork's commit: %v: %s", err, out)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a fork onto an existing repository did not fail")
		}
	}()
	r.Fork(&fatalPanics{t}, "team/fork")
}

// fatalPanics turns Fatalf into a panic, to see that a helper fails.
type fatalPanics struct{ *testing.T }

func (f *fatalPanics) Fatalf(format string, args ...any) { panic(format) }
