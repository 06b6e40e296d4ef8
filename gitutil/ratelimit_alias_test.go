package gitutil_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/modwatch/modwatch/gitutil"
)

// A limit of github.com held by the Lister stops a listing of
// https://github.com./...: a fully qualified name is the same host.
func TestATrailingDotIsTheSameHost(t *testing.T) {
	l := gitutil.NewLister()
	l.NoteLimit(&gitutil.RateLimitError{Host: "github.com", Code: 429, Until: time.Now().Add(time.Hour)})
	if l.HostLimit("github.com") == nil {
		t.Fatal("no limit held for github.com")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := l.ListRefs(ctx, "https://github.com./modwatch/modwatch.git", nil, []string{"HEAD"})
	e, _ := gitutil.ParseURL("https://github.com./modwatch/modwatch.git")
	if !errors.Is(err, gitutil.ErrRateLimited) {
		t.Fatalf("listing https://github.com./... (host %q) while github.com's limit holds was sent, not stopped: %v", e.Host, err)
	}
}
