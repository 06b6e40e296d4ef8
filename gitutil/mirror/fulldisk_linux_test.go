//go:build linux

package mirror

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/dev/gittest"
)

// A full disk, for real and without privileges: each case runs in a
// process of this test binary in a user and mount namespace of its own,
// in which it is root and mounts a tmpfs of its own size, which it can
// shrink to a few KiB more than the mirror holds. Writes there fail with
// ENOSPC, as on a full disk. (RLIMIT_FSIZE fails a write with EFBIG, and
// bounds each file, not the room: a temporary pack left behind would not
// take the room of the next.)

// fullDiskEnv tells the process that runs a case in its namespaces the
// directory to mount the tmpfs on and the URL of the repository, one a
// line.
const fullDiskEnv = "MODWATCH_TEST_FULL_DISK"

// fullDiskCase is a case of TestFullDiskLeavesNothing: a mirror, a fetch
// of prep with room (none: "", the mirror stays empty), then a fetch of refs/heads/main on a disk with slack
// bytes free (rounded to pages), which fails for want of room (or, for a
// repack, leaves a mirror as the fetch made it), and again with room.
type fullDiskCase struct {
	name  string
	opts  Options
	prep  string
	slack int64
	op    func(ctx context.Context, m *Mirror, url string) error
}

func fetchMainOf(ctx context.Context, m *Mirror, _ string) error { return fetchMain(ctx, m) }

func fetchListedMain(ctx context.Context, m *Mirror, url string) error {
	refs, err := m.lister.ListRefs(ctx, url, nil, nil)
	if err != nil {
		return err
	}
	_, err = m.FetchListed(ctx, nil, map[string]gitutil.Hash{"refs/heads/main": refs.Refs["refs/heads/main"]})
	return err
}

// fetchMainRepacked is fetchMain that reports a failed repack as its
// error.
func fetchMainRepacked(ctx context.Context, m *Mirror, _ string) error {
	res, err := m.Fetch(ctx, nil, []string{"refs/heads/main"})
	if err == nil && !res.Repacked {
		err = res.RepackErr
	}
	return err
}

// The repository: refs/tags/small, a small commit; refs/tags/big, a big
// file after it (a pack of some 130 KiB); refs/heads/main, another after
// that. A repack of the two big packs needs 260 KiB.
var fullDiskCases = []fullDiskCase{
	{"go-git", Options{}, "refs/tags/small", 64 << 10, fetchMainOf},
	// The CLI's clone into an empty mirror, then go-git's fetch.
	{"git-CLI-first", Options{GitCLI: "git"}, "", 64 << 10, fetchMainOf},
	// The CLI's index-pack of one request, then go-git's fetch.
	{"git-CLI-first-listed", Options{GitCLI: "git"}, "", 64 << 10, fetchListedMain},
	{"listed", Options{}, "refs/tags/small", 64 << 10, fetchListedMain},
	{"git-CLI", Options{GitCLI: "git", ShallowDepth: 1}, "refs/tags/small", 64 << 10, fetchMainOf},
	{"go-git-repack", Options{RepackPacks: 1}, "refs/tags/big", 200 << 10, fetchMainRepacked},
}

// A fetch, or a repack, that fails on a full disk leaves nothing behind:
// the room it took is free again at once, and the same operation succeeds
// once there is room. (go-git's temporary pack stayed, open, until the
// next start; the git CLI's until the next start too, and took the room
// of go-git's fetch that stands in for it.)
func TestFullDiskLeavesNothing(t *testing.T) {
	if env := os.Getenv(fullDiskEnv); env != "" {
		mnt, url, _ := strings.Cut(env, "\n")
		for _, tc := range fullDiskCases {
			t.Run(tc.name, func(t *testing.T) { fullDisk(t, tc, mnt, url) })
		}
		// The server is the parent's, and outlives this process: no
		// connection to it is a leak.
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		return
	}
	// One repository for every case: none of them changes it.
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "g/r")
	repo.Commit(t, "small", gittest.File("a", "a"))
	repo.Tag(t, "small", false)
	repo.Commit(t, "big", gittest.File("big", noise(t, 256<<10)))
	repo.Tag(t, "big", false)
	repo.Commit(t, "big2", gittest.File("big2", noise(t, 256<<10)))
	for _, tc := range fullDiskCases {
		t.Run(tc.name, func(t *testing.T) {
			mnt := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^TestFullDiskLeavesNothing$/^"+tc.name+"$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), fullDiskEnv+"="+mnt+"\n"+repo.URL())
			cmd.SysProcAttr = &syscall.SysProcAttr{
				Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
				UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
				GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
			}
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			require.Contains(t, string(out), "--- PASS: TestFullDiskLeavesNothing/"+tc.name)
		})
	}
}

// fullDisk is a case, in its namespaces.
func fullDisk(t *testing.T, tc fullDiskCase, mnt, url string) {
	require.NoError(t, syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=16m"))
	dir := filepath.Join(mnt, "mirror")
	var fellBack []error
	tc.opts.OnFallback = func(cli error) { fellBack = append(fellBack, cli) }
	m, err := Open(dir, url, tc.opts)
	require.NoError(t, err)
	t.Cleanup(m.lister.CloseIdleConnections)
	if tc.prep != "" {
		_, err = m.Fetch(ctxT(t), nil, []string{tc.prep})
		require.NoError(t, err)
	}
	used, _ := diskUse(t, mnt)
	require.NoError(t, syscall.Mount("tmpfs", mnt, "tmpfs", syscall.MS_REMOUNT, fmt.Sprintf("size=%d", used+tc.slack)))
	_, free := diskUse(t, mnt)

	err = tc.op(ctxT(t), m, url)
	require.Error(t, err)
	require.Regexp(t, `no space left on device|Out of diskspace`, err.Error()) // go-git's, git's
	if tc.opts.GitCLI != "" && tc.opts.RepackPacks == 0 {
		require.NotEmpty(t, fellBack, "the CLI failed first")
		require.Regexp(t, `No space left on device|Out of diskspace|write error`, fellBack[0].Error())
	}
	requireNothingLeft(t, dir)
	if tc.opts.RepackPacks == 0 {
		_, after := diskUse(t, mnt)
		assert.Equal(t, free, after, "the room the failed fetch took is free again")
	}

	require.NoError(t, syscall.Mount("tmpfs", mnt, "tmpfs", syscall.MS_REMOUNT, "size=16m"))
	require.NoError(t, tc.op(ctxT(t), m, url))
	requireNothingLeft(t, dir)
}

// diskUse is the bytes used and free on the file system of dir.
func diskUse(t *testing.T, dir string) (used, free int64) {
	t.Helper()
	var st syscall.Statfs_t
	require.NoError(t, syscall.Statfs(dir, &st))
	return int64(st.Blocks-st.Bfree) * st.Bsize, int64(st.Bfree) * st.Bsize
}
