package apply_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/modwatch/modwatch/sink/apply"
)

// A Result's summary says which objects were left alone for their kind,
// apart from those skipped at prune; it becomes a GitSync's status message.
func TestResultStringNamesWhatIsOutsideTheIncludedKinds(t *testing.T) {
	cm := apply.ObjectRef{Version: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "a"}
	svc := func(name string) apply.Entry {
		return apply.Entry{Object: apply.ObjectRef{Version: "v1", Kind: "Service", Namespace: "ns", Name: name}, Action: apply.Skipped, Reason: apply.SkipNotIncluded}
	}
	tests := []struct {
		name    string
		res     apply.Result
		want    string
		skipped int
	}{
		{name: "none", res: apply.Result{Entries: []apply.Entry{{Object: cm, Action: apply.Created}}}, want: "1 created"},
		{name: "skipped at prune only", res: apply.Result{Entries: []apply.Entry{{Object: cm, Action: apply.Skipped}}}, want: "1 skipped"},
		{name: "one outside", res: apply.Result{Entries: []apply.Entry{svc("web"), {Object: cm, Action: apply.Created}}},
			want: "1 created, 1 skipped; 1 outside the included kinds, left alone: Service/ns/web", skipped: 1},
		{name: "in a dry run", res: apply.Result{Mode: apply.ModeDryRun, Entries: []apply.Entry{svc("web")}},
			want: "1 skipped (DryRun); 1 outside the included kinds, left alone: Service/ns/web", skipped: 1},
		{name: "many", res: apply.Result{Entries: []apply.Entry{svc("a"), svc("b"), svc("c"), svc("d"), svc("e"), svc("f"), svc("g")}},
			want: "7 skipped; 7 outside the included kinds, left alone: Service/ns/a, Service/ns/b, Service/ns/c, Service/ns/d, Service/ns/e, and 2 more", skipped: 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.res.String())
			assert.Len(t, tt.res.SkippedFor(apply.SkipNotIncluded), tt.skipped)
		})
	}
}
