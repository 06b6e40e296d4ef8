package flux_test

import (
	"fmt"

	"github.com/modwatch/modwatch/source/flux"
)

func ExampleRevision() {
	for _, ref := range []map[string]string{
		{"branch": "main"},
		{"branch": "main", "tag": "v1.2.0"},
		{"semver": ">=1.0.0 <2.0.0"},
		{"commit": "0123456789abcdef0123456789abcdef01234567"},
		nil,
	} {
		rev, watch := flux.Revision(ref)
		fmt.Printf("%q %v\n", rev, watch)
	}
	// Output:
	// "refs/heads/main" true
	// "refs/tags/v1.2.0" true
	// "semver:>=1.0.0 <2.0.0" true
	// "" false
	// "refs/heads/master" true
}
