package fluxartifact_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/modwatch/modwatch/internal/dev/gittest"
	"github.com/modwatch/modwatch/internal/dev/testenv"
	"github.com/modwatch/modwatch/internal/dev/testenv/fluxtest"
	"github.com/modwatch/modwatch/internal/dev/upstream"
)

// side is one controller of the comparison: its namespace, its git server
// (the same repositories as the other's), its process.
type side struct {
	name  string
	ns    string
	git   *gittest.Server
	repos []*gittest.Repo
	head  []string // each repository's commit
	pid   int
}

// BenchmarkAgainstSourceController serves the same GitRepositories with
// Flux's own source-controller and with examples/fluxsource, side by side
// on one apiserver: each controller a process of its own, watching a
// namespace of its own, with a git server of its own holding the same
// repositories, so that what each costs is counted apart. The fleet is
// BENCH_REPOS repositories (10) of BENCH_PER_REPO GitRepositories each
// (100), each selecting a folder of its own (spec.ignore), polled every
// 30s; with BENCH_BULK_MIB, each repository also holds that many MiB of
// incompressible files in a folder no GitRepository selects (a monorepo's
// other parts, which a clone brings all the same); BENCH_WAIT_MIN bounds
// the wait for every artifact (10 minutes). Reported, for each: the time until every GitRepository has its
// artifact, its resident memory once they have, the git requests its
// server sees in one interval after that, and, after a push to one
// repository, the time until its GitRepositories' artifacts are all at
// the new commit; and ours against source-controller's.
func BenchmarkAgainstSourceController(b *testing.B) {
	repos, per := envInt(b, "BENCH_REPOS", 10), envInt(b, "BENCH_PER_REPO", 100)
	bulk := bulkFiles(b, envInt(b, "BENCH_BULK_MIB", 0))
	wait := time.Duration(envInt(b, "BENCH_WAIT_MIN", 10)) * time.Minute
	const interval = 30 * time.Second
	bin := buildFluxSource(b)
	for range b.N {
		sides := []*side{{name: "source-controller"}, {name: "fluxsource"}}
		for _, s := range sides {
			s.ns = env.Namespace(b)
			s.git = gittest.NewServer(b)
			for r := range repos {
				repo := s.git.NewRepo(b, fmt.Sprintf("fleet/r%d", r))
				files := slices.Clone(bulk)
				for p := range per {
					files = append(files, gittest.File(fmt.Sprintf("app-%d/cm.yaml", p), fmt.Sprintf("kind: ConfigMap\nmetadata: {name: app-%d}\n", p)))
				}
				s.repos, s.head = append(s.repos, repo), append(s.head, repo.Commit(b, "init", files...))
			}
		}
		sides[0].pid = fluxtest.StartSourceControllerIn(b, env.Config, sides[0].ns).PID()
		sides[1].pid = startFluxSource(b, bin, sides[1].ns)
		rows := map[string][]string{}
		for _, s := range sides {
			start := time.Now()
			createFleet(b, s, per, interval)
			ready := waitFleet(b, s, per, wait)
			rows[s.name] = append(rows[s.name], fmt.Sprintf("%.1f s", ready.Sub(start).Seconds()))
		}
		time.Sleep(interval) // the first reconciliations' garbage collected
		var rss, reqs, push [2]float64
		for i, s := range sides {
			rss[i] = float64(residentKiB(b, s.pid)) / 1024
			rows[s.name] = append(rows[s.name], fmt.Sprintf("%.0f MiB", rss[i]))
		}
		from := time.Now()
		time.Sleep(interval)
		for i, s := range sides {
			reqs[i] = float64(requestsSince(s.git, from))
			rows[s.name] = append(rows[s.name], fmt.Sprintf("%.0f", reqs[i]))
		}
		for _, s := range sides {
			s.head[0] = s.repos[0].Commit(b, "push", gittest.File("app-0/cm.yaml", "kind: ConfigMap\nmetadata: {name: app-0}\ndata: {a: b}\n"))
		}
		pushed := time.Now()
		for i, at := range waitRepo(b, sides, 0, per, 3*interval) {
			push[i] = at.Sub(pushed).Seconds()
			rows[sides[i].name] = append(rows[sides[i].name], fmt.Sprintf("%.1f s", push[i]))
		}
		b.ReportMetric(rss[1]/rss[0], "rss-ours/theirs")
		b.ReportMetric(reqs[1]/max(reqs[0], 1), "requests-ours/theirs")
		b.ReportMetric(push[1]/push[0], "push-ours/theirs")
		b.ReportMetric(rss[0], "MiB-source-controller")
		b.ReportMetric(rss[1], "MiB-fluxsource")
		b.Logf("%d GitRepositories on %d repositories (%d MiB of other files each), interval %s\n| controller | all artifacts stored | resident memory | git requests in one interval | push → its %d artifacts |\n|---|---|---|---|---|\n| source-controller %s | %s |\n| fluxsource | %s |",
			repos*per, repos, len(bulk), interval, per, fluxtest.SourceControllerVersion, strings.Join(rows["source-controller"], " | "), strings.Join(rows["fluxsource"], " | "))
	}
}

// bulkFiles are mib files of 1 MiB of random bytes under bulk/, the
// same for every repository; none for 0.
func bulkFiles(b *testing.B, mib int) []gittest.Change {
	var out []gittest.Change
	for i := range mib {
		data := make([]byte, 1<<20)
		if _, err := rand.Read(data); err != nil {
			b.Fatal(err)
		}
		out = append(out, gittest.File(fmt.Sprintf("bulk/%03d.bin", i), string(data)))
	}
	return out
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n < 1 && name != "BENCH_BULK_MIB" {
		b.Fatalf("%s=%q: a count of at least 1", name, v)
	}
	return n
}

// buildFluxSource builds examples/fluxsource.
func buildFluxSource(b *testing.B) string {
	root, err := upstream.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	bin := filepath.Join(b.TempDir(), "fluxsource")
	cmd := exec.Command("go", "build", "-o", bin, "./examples/fluxsource")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("go build ./examples/fluxsource: %v\n%s", err, out)
	}
	return bin
}

// startFluxSource runs examples/fluxsource watching ns, until the
// benchmark ends.
func startFluxSource(b *testing.B, bin, ns string) int {
	dir := b.TempDir()
	if err := fluxtest.WriteKubeconfig(env.Config, filepath.Join(dir, "kubeconfig")); err != nil {
		b.Fatal(err)
	}
	storage, err := testenv.FreeAddr()
	if err != nil {
		b.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "storage"), 0o700); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "-storage-path="+filepath.Join(dir, "storage"), "-storage-addr="+storage, "-storage-adv-addr="+storage,
		"-watch-all-namespaces=false", "-metrics-addr=0", "-health-addr=0", "-cache-dir="+filepath.Join(dir, "cache"))
	cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(dir, "kubeconfig"), "RUNTIME_NAMESPACE="+ns)
	log, err := os.Create(filepath.Join(dir, "log"))
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		log.Close()
		if b.Failed() {
			data, _ := os.ReadFile(log.Name())
			b.Logf("fluxsource's log:\n%s", data)
		}
	})
	return cmd.Process.Pid
}

// createFleet creates s's GitRepositories: per a repository, each
// selecting its folder.
func createFleet(b *testing.B, s *side, per int, interval time.Duration) {
	client := env.Dynamic.Resource(gitRepos).Namespace(s.ns)
	for r, repo := range s.repos {
		for p := range per {
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
				"metadata": map[string]any{"name": fmt.Sprintf("r%d-app-%d", r, p), "namespace": s.ns},
				"spec": map[string]any{"url": repo.URL(), "interval": interval.String(), "ref": map[string]any{"branch": "main"},
					"ignore": fmt.Sprintf("/*\n!/app-%d/\n", p)},
			}}
			if _, err := client.Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// waitFleet waits until every GitRepository of s has its artifact at its
// repository's commit, and says when.
func waitFleet(b *testing.B, s *side, per int, limit time.Duration) time.Time {
	return waitArtifacts(b, []*side{s}, limit, len(s.repos)*per, func(s *side, name string) (string, bool) {
		var r, p int
		if _, err := fmt.Sscanf(name, "r%d-app-%d", &r, &p); err != nil || r >= len(s.head) {
			return "", false
		}
		return s.head[r], true
	})[0]
}

// waitRepo waits until the GitRepositories of each side's repository r
// have their artifacts at its commit, and says when, for each.
func waitRepo(b *testing.B, sides []*side, r, per int, limit time.Duration) []time.Time {
	prefix := fmt.Sprintf("r%d-", r)
	return waitArtifacts(b, sides, limit, per, func(s *side, name string) (string, bool) {
		return s.head[r], strings.HasPrefix(name, prefix)
	})
}

// waitArtifacts waits until n GitRepositories of each side have their
// artifact at the commit want says for them, and says when, for each.
func waitArtifacts(b *testing.B, sides []*side, limit time.Duration, n int, want func(s *side, name string) (string, bool)) []time.Time {
	done := make([]time.Time, len(sides))
	deadline := time.Now().Add(limit)
	for left := len(sides); ; {
		for i, s := range sides {
			if !done[i].IsZero() {
				continue
			}
			at := 0
			list, err := env.Dynamic.Resource(gitRepos).Namespace(s.ns).List(context.Background(), metav1.ListOptions{})
			if err != nil {
				b.Fatal(err)
			}
			for _, u := range list.Items {
				commit, ok := want(s, u.GetName())
				rev, _, _ := unstructured.NestedString(u.Object, "status", "artifact", "revision")
				if ok && rev == "main@sha1:"+commit {
					at++
				}
			}
			if at == n {
				done[i], left = time.Now(), left-1
			} else if time.Now().After(deadline) {
				b.Fatalf("%s: %d of %d artifacts at their commit after %s", s.name, at, n, limit)
			}
		}
		if left == 0 {
			return done
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// residentKiB is the resident memory of process pid (VmRSS).
func residentKiB(b *testing.B, pid int) int {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kib, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			if err != nil {
				b.Fatal(err)
			}
			return kib
		}
	}
	b.Fatalf("no VmRSS for process %d", pid)
	return 0
}

// requestsSince counts the requests srv received since from.
func requestsSince(srv *gittest.Server, from time.Time) int {
	n := 0
	for _, r := range srv.Requests() {
		if !r.Time.Before(from) {
			n++
		}
	}
	return n
}
