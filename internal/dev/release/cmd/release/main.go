// Command release makes and checks the project's releases (package
// github.com/modwatch/modwatch/internal/dev/release says what each does):
//
//	release -version vX.Y.Z   make a release: requirements, check, commit, tags
//	release -check            check the tree as a release would
//	release -tidy             go mod tidy in every module, outside the workspace
//	release -api              report the API changes since the last release;
//	                          fail on an incompatible one CHANGELOG.md does not name
//	release -proxy DIR -version vX.Y.Z
//	                          write the tagged release into DIR as a module proxy
//
// Run it from anywhere in the repository; nothing is pushed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"time"

	"github.com/modwatch/modwatch/internal/dev/release"
)

func main() {
	version := flag.String("version", "", "the release to make (or to write with -proxy): vX.Y.Z")
	check := flag.Bool("check", false, "check the tree as a release would, and change nothing")
	tidy := flag.Bool("tidy", false, "go mod tidy every module outside the workspace, the others standing in by replaces")
	api := flag.Bool("api", false, "compare the exported API with the last release")
	proxy := flag.String("proxy", "", "write the tagged release -version into this directory, laid out as a module proxy")
	flag.Parse()
	if flag.NArg() > 0 {
		fail(fmt.Errorf("unexpected arguments: %s", strings.Join(flag.Args(), " ")))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	out, err := exec.CommandContext(ctx, "git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		fail(fmt.Errorf("not in a Git checkout: %w", err))
	}
	root := strings.TrimSpace(string(out))
	switch {
	case *tidy && !*api && !*check && *proxy == "" && *version == "":
		fail(release.Tidy(ctx, root))
	case *api && !*check && *proxy == "" && *version == "":
		fail(runAPI(ctx, root))
	case *check && !*api && *proxy == "" && *version == "":
		fail(release.Check(ctx, root))
	case *proxy != "" && *version != "" && !*api && !*check:
		mods, err := release.PublishedModules(root)
		if err == nil {
			err = release.WriteProxy(ctx, root, *proxy, *version, mods)
		}
		fail(err)
	case *version != "" && !*api && !*check:
		tags, err := release.Release(ctx, root, *version, time.Now())
		if err == nil {
			fmt.Printf("released %s: tags %s\npublish with: git push origin HEAD %s\n", *version, strings.Join(tags, " "), strings.Join(tags, " "))
		}
		fail(err)
	default:
		flag.Usage()
		os.Exit(2)
	}
}

func runAPI(ctx context.Context, root string) error {
	version, changes, ok, err := release.SinceLastRelease(ctx, root)
	if err != nil || !ok {
		if err == nil {
			fmt.Println("api: no release yet, nothing to compare with")
		}
		return err
	}
	fmt.Printf("api: %d changes to the exported API since %s\n", len(changes), version)
	for _, c := range changes {
		fmt.Println("  " + c.String())
	}
	unreleased, err := release.UnreleasedNotes(root)
	if err != nil {
		return err
	}
	if missing := release.Undocumented(changes, unreleased); len(missing) > 0 {
		var b strings.Builder
		for _, c := range missing {
			fmt.Fprintf(&b, "\n  %s (name %s in CHANGELOG.md)", c, c.Ident())
		}
		return fmt.Errorf("incompatible changes since %s that CHANGELOG.md's Unreleased section does not name:%s", version, b.String())
	}
	return nil
}

func fail(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}
