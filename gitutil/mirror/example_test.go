package mirror_test

import (
	"fmt"
	"strings"

	"github.com/modwatch/modwatch/gitutil"
)

func ExampleNormalizeURL() {
	for _, u := range []string{
		"https://GitHub.com/fluxcd/flux2.git",
		"git@github.com:fluxcd/flux2",
		"ssh://git@github.com:22/fluxcd/flux2.git",
	} {
		key, _ := gitutil.NormalizeURL(u)
		fmt.Println(key)
	}
	fmt.Println(gitutil.RedactURL("https://deploy:s3cret@git.example.com/r.git"))
	// Output:
	// github.com/fluxcd/flux2
	// github.com/fluxcd/flux2
	// github.com/fluxcd/flux2
	// https://redacted@git.example.com/r.git
}

func ExampleResolve() {
	hash := func(digit string) gitutil.Hash {
		h, err := gitutil.ParseHash(strings.Repeat(digit, 40))
		if err != nil {
			panic(err)
		}
		return h
	}
	refs := gitutil.RefList{
		Head: "refs/heads/main",
		Refs: map[string]gitutil.Hash{
			"refs/heads/main":  hash("1"),
			"refs/tags/v1.2.0": hash("2"),
			"refs/tags/v1.3.0": hash("3"),
			"refs/tags/v2.0.0": hash("4"),
		},
	}
	for _, s := range []string{"", "v1.2.0", ">=1.0 <2.0", "abc1234"} {
		rev, err := gitutil.ParseRevision(s)
		if err != nil {
			fmt.Println(err)
			continue
		}
		res, err := gitutil.Resolve(rev, refs)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("%q -> %s %.7s\n", s, res.Ref, res.Commit)
	}
	// Output:
	// "" -> refs/heads/main 1111111
	// "v1.2.0" -> refs/tags/v1.2.0 2222222
	// ">=1.0 <2.0" -> refs/tags/v1.3.0 3333333
	// revision "abc1234": gitutil: abbreviated commit SHA: write the full 40-character SHA
}
