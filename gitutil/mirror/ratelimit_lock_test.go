package mirror_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/mirror"
	"github.com/modwatch/modwatch/internal/dev/gittest"
)

// A fetch that waited for the mirror's lock while another was answered
// 429 sends nothing: the host's limit is asked again under the lock.
func TestAFetchThatWaitedForTheLockHonoursANewLimit(t *testing.T) {
	srv := gittest.NewServer(t)
	repo := srv.NewRepo(t, "app")
	repo.Commit(t, "one", gittest.File("a", "1"))
	lister := gitutil.NewLister()
	m, err := mirror.Open(t.TempDir(), repo.URL(), mirror.Options{Lister: lister})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := m.Fetch(ctx, nil, []string{"refs/heads/main"}); err != nil {
		t.Fatal(err)
	}
	repo.Commit(t, "two", gittest.File("a", "2"))

	release := srv.HoldAll()
	before := len(srv.Requests())
	aDone := make(chan error, 1)
	go func() { _, err := m.Fetch(ctx, nil, []string{"refs/heads/main"}); aDone <- err }()
	deadline := time.Now().Add(10 * time.Second)
	for srv.Held() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if srv.Held() == 0 {
		t.Fatal("fetch A's request never reached the server")
	}
	// B passes prepare (no limit yet) and waits for A's lock.
	bDone := make(chan error, 1)
	go func() { _, err := m.Fetch(ctx, nil, []string{"refs/heads/main"}); bDone <- err }()
	time.Sleep(200 * time.Millisecond)
	// The host now limits the client for an hour; A is answered so.
	srv.Limit(gittest.Limit{Kind: gittest.TooManyRequests, Until: time.Now().Add(time.Hour)})
	release()
	errA, errB := <-aDone, <-bDone
	t.Logf("A: %v", errA)
	t.Logf("B: %v", errB)
	if lister.HostLimit(hostOf(t, repo.URL())) == nil {
		t.Fatal("the Lister holds no limit after A's 429")
	}
	refused := 0
	for _, r := range srv.Requests()[before:] {
		if r.Status == http.StatusTooManyRequests {
			refused++
		}
	}
	if refused > 1 {
		t.Fatalf("%d requests were answered 429: B sent one after A's 429 set the host's limit in the Lister (its HostLimit check came before it waited for the mirror's lock)", refused)
	}
}

func hostOf(t *testing.T, u string) string {
	e, err := gitutil.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	return e.Host
}
