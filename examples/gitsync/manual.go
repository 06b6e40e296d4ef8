package main

import (
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

// printInfo prints what --version, --help or --man ask for.
func printInfo(w io.Writer, c config) {
	switch {
	case c.version:
		fmt.Fprintln(w, version())
	case c.manual:
		printManual(w)
	default:
		fmt.Fprintf(w, "Usage: gitsync [FLAGS...]\n\n FLAGS:\n")
		var d config
		fs := d.flags(w)
		fs.PrintDefaults()
		fmt.Fprintf(w, "\n ENVIRONMENT VARIABLES:\n    GITSYNC_<FLAG> (or GIT_SYNC_<FLAG>) for each flag: see --man\n")
	}
}

// version is the module version the program was built at ("(devel)"
// from a checkout).
func version() string {
	v := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		v = bi.Main.Version
	}
	return "gitsync (modwatch) " + v
}

// printManual prints every flag with the variables that set it and its
// default, and what the program is.
func printManual(w io.Writer) {
	fmt.Fprint(w, `GITSYNC(1)

NAME
    gitsync - git-sync (v4) built on modwatch: sync a git repository into a
    directory, as git-sync does. What differs from git-sync is in
    docs/migrating.md.

SYNOPSIS
    gitsync --repo=<repo> --root=<path> [OPTIONS]...

OPTIONS
    Each flag can also be set by its variables (the command line wins; of
    the variables, the last listed that is set wins). A list's variable
    separates its items with ':'.

`)
	var d config
	fs := d.flags(io.Discard)
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "?" || f.Name == "h" {
			return
		}
		names := append([]string{"$GITSYNC_" + envName(f.Name), "$GIT_SYNC_" + envName(f.Name)}, v3Env[f.Name]...)
		for i := 2; i < len(names); i++ {
			names[i] = "$" + names[i]
		}
		fmt.Fprintf(w, "    --%s, %s\n", f.Name, strings.Join(names, ", "))
		fmt.Fprintf(w, "        %s", f.Usage)
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" && f.DefValue != "0s" {
			fmt.Fprintf(w, " (default: %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
	fmt.Fprint(w, `
    $GITSYNC_PASSWORD, $GIT_SYNC_PASSWORD
        the password or personal access token to use for git auth (a
        variable only, as git-sync's)
`)
}
