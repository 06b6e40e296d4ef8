package gitutil_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/modwatch/modwatch/gitutil"
)

// Limits noted for as many other hosts as the Lister keeps (a .gitmodules
// names any hosts; each of an attacker's answers 429) do not evict a
// limit that holds longer: the Lister keeps sending that host nothing.
func TestALimitThatHoldsOutlivesAFloodOfOthers(t *testing.T) {
	l := gitutil.NewLister()
	l.NoteLimit(&gitutil.RateLimitError{Host: "github.com", Code: 429, Until: time.Now().Add(time.Hour)})
	for i := range gitutil.MaxListerServers {
		l.NoteLimit(&gitutil.RateLimitError{Host: fmt.Sprintf("h%d.evil.example", i), Code: 429, Until: time.Now().Add(time.Second)})
	}
	if l.HostLimit("github.com") == nil {
		t.Fatalf("github.com's limit, an hour long, was forgotten after %d other hosts' limits (the most of them only a second long)", gitutil.MaxListerServers)
	}
}
