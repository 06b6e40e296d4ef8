package gitsync_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/modwatch/modwatch/source/gitsync"
	"github.com/modwatch/modwatch/watcher/payload"
)

func TestValidDestination(t *testing.T) {
	for ns, want := range map[string]string{
		"team-a":                 "",
		"a":                      "",
		"":                       `"" is not a namespace name`,
		"Team-A":                 "is not a namespace name",
		"team_a":                 "is not a namespace name",
		"-a":                     "is not a namespace name",
		"a.b":                    "is not a namespace name",
		"../kube-system":         "is not a namespace name",
		strings.Repeat("a", 63):  "",
		strings.Repeat("a", 64):  "is not a namespace name",
		"kube-system\x00":        "is not a namespace name",
		"ns with spaces":         "is not a namespace name",
		"team-a\n":               "is not a namespace name",
		"xn--bcher-kva":          "",
		"default":                "",
		"1234":                   "",
		"a-":                     "is not a namespace name",
		strings.Repeat("a-", 40): "is not a namespace name",
	} {
		var gs payload.GitSync
		gs.Destination.Namespace = ns
		err := gitsync.ValidDestination(&metav1.ObjectMeta{Name: "g"}, gs)
		if want == "" {
			assert.NoError(t, err, "%q", ns)
		} else if assert.Error(t, err, "%q", ns) {
			assert.Contains(t, err.Error(), want, "%q", ns)
			assert.Contains(t, err.Error(), "spec.destination.namespace", "names the field")
		}
	}
}
