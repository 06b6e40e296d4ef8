package main

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/internal/dev/gittest"
)

// consumerUID and volumeGID are the consumer container's uid and the
// volume's group (its fsGroup) of git-sync's docs.
const consumerUID, volumeGID = 65532, 65533

// volume is a directory any uid can reach, set-group-ID and in the
// volume's group when the test runs as root (an emptyDir with an
// fsGroup), 2775.
func volume(t *testing.T) string {
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		require.NoError(t, err)
		require.NoError(t, os.Chmod(d, fi.Mode().Perm()|0o755)) // the test's own directories
	}
	if os.Getuid() == 0 {
		require.NoError(t, os.Chown(dir, 0, volumeGID))
	}
	require.NoError(t, os.Chmod(dir, 0o775|fs.ModeSetgid))
	return dir
}

// asConsumer runs git in dir as the consumer: another uid, in the
// volume's group only (setpriv, as root; CI runs as root).
func asConsumer(t *testing.T, dir string, args ...string) (string, error) {
	cmd := exec.Command("setpriv", append([]string{"--reuid", "65532", "--regid", "65533", "--clear-groups", "--",
		"git", "-c", "safe.directory=*", "-C", dir}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=/nonexistent", "GIT_CONFIG_NOSYSTEM=1"}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// The root the command makes is 0775 less git-sync's umask: 022 (the
// process's own is not kept, as git-sync sets it), or 002 with
// --group-write.
func TestRootMode(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/app")
	repo.Commit(t, "0", gittest.File("f", "0"))
	for _, tc := range []struct {
		name  string
		umask int
		flags []string
		want  fs.FileMode
	}{
		{"umask 022", 0o022, nil, 0o755},
		{"umask 077", 0o077, nil, 0o755},
		{"umask 077, --group-write", 0o077, []string{"--group-write"}, 0o775},
		{"--group-write", 0o022, []string{"--group-write"}, 0o775},
	} {
		t.Run(tc.name, func(t *testing.T) {
			syscall.Umask(tc.umask)
			root := filepath.Join(t.TempDir(), "made", "root")
			var out syncBuffer
			code := run(context.Background(), append([]string{"--repo", repo.URL(), "--root", root, "--one-time"}, tc.flags...), noEnv, &out)
			require.Equal(t, 0, code, out.String())
			fi, err := os.Stat(root)
			require.NoError(t, err)
			assert.Equal(t, tc.want, fi.Mode().Perm())
		})
	}
}

// With --group-write, git works in the link for a consumer of another uid
// in the volume's group (git-sync's emptyDir with an fsGroup): root
// borrows its objects from the mirrors, which are searchable and readable
// as git-sync's root's own objects are — go-git's fetches, whose packs
// are 0600, included (--depth 0: go-git fetches after the first).
func TestConsumerOfAnotherUIDRunsGit(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/app")
	repo.Commit(t, "0", gittest.File("f", "0"))
	root := filepath.Join(volume(t), "git")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	var stderr syncBuffer
	go func() {
		done <- run(ctx, []string{"--repo", repo.URL(), "--root", root, "--link", "app", "--period", "100ms", "--depth", "0", "--group-write"}, noEnv, &stderr)
	}()
	link := filepath.Join(root, "app")
	synced := func(want string) {
		t.Helper()
		require.Eventually(t, func() bool {
			head, err := os.ReadFile(filepath.Join(link, "f"))
			return err == nil && string(head) == want
		}, 30*time.Second, 20*time.Millisecond, "%s", &stderr)
	}
	synced("0")
	c1 := repo.Commit(t, "1", gittest.File("f", "1"))
	synced("1")

	// What the consumer reads: root searchable, the mirrors' directory
	// searchable, each mirror's objects readable by the group.
	fi, err := os.Stat(root)
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o775), fi.Mode().Perm())
	mirrors := filepath.Join(root, ".mirrors")
	fi, err = os.Stat(mirrors)
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o010), fi.Mode().Perm()&0o010, ".mirrors is searchable by the group: %v", fi.Mode())
	packs, err := filepath.Glob(filepath.Join(mirrors, "*", "objects", "pack", "*"))
	require.NoError(t, err)
	require.NotEmpty(t, packs)
	for _, p := range packs {
		fi, err := os.Stat(p)
		require.NoError(t, err)
		assert.Equal(t, fs.FileMode(0o040), fi.Mode().Perm()&0o040, "%s is readable by the group: %v", p, fi.Mode())
	}
	if os.Getuid() != 0 {
		t.Log("not root: git is not run as the consumer uid (setpriv needs root); the modes it needs are checked above")
		return
	}
	for _, p := range append(packs, mirrors, root) {
		var st syscall.Stat_t
		require.NoError(t, syscall.Stat(p, &st))
		assert.Equal(t, uint32(volumeGID), st.Gid, "%s is in the volume's group", p)
	}
	out, err := asConsumer(t, link, "log", "--format=%H", "-1")
	require.NoError(t, err, out)
	assert.Equal(t, c1, out)
	out, err = asConsumer(t, link, "status", "--porcelain")
	require.NoError(t, err, out)
	assert.Empty(t, out, "the worktree is clean")
	cancel()
	assert.Equal(t, 0, <-done, stderr.String())

	// The volume mounted elsewhere (moved, here): git still works in the
	// link, whose worktree, and root's objects, are named relatively.
	moved := filepath.Join(filepath.Dir(filepath.Dir(root)), "elsewhere")
	require.NoError(t, os.Rename(filepath.Dir(root), moved))
	out, err = asConsumer(t, filepath.Join(moved, "git", "app"), "log", "--format=%H", "-1")
	require.NoError(t, err, out)
	assert.Equal(t, c1, out)
}
