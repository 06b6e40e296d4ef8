package release

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// WriteProxy writes the release version of each module of mods, made from
// the Git repository at root by its tag, into dir in the layout of a module
// proxy (GOPROXY=file://dir): <module>/@v/list, <version>.info, .mod and
// .zip, the zip made from the tagged commit as a proxy makes it
// (golang.org/x/mod/zip.CreateFromVCS: tracked files only, nested modules
// left out).
func WriteProxy(ctx context.Context, root, dir, version string, mods []Module) error {
	for _, m := range mods {
		tag := m.Tag(version)
		when, err := git(ctx, root, "log", "-1", "--format=%cI", tag)
		if err != nil {
			return err
		}
		t, err := time.Parse(time.RFC3339, when)
		if err != nil {
			return err
		}
		sub := ""
		if m.Dir != "." {
			sub = m.Dir
		}
		gomod, err := git(ctx, root, "show", tag+":"+filepath.ToSlash(filepath.Join(sub, "go.mod")))
		if err != nil {
			return err
		}
		esc, err := module.EscapePath(m.Path)
		if err != nil {
			return err
		}
		vdir := filepath.Join(dir, filepath.FromSlash(esc), "@v")
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			return err
		}
		info, _ := json.Marshal(struct {
			Version string
			Time    time.Time
		}{version, t.UTC()})
		if err := os.WriteFile(filepath.Join(vdir, version+".info"), info, 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(vdir, version+".mod"), []byte(gomod+"\n"), 0o644); err != nil {
			return err
		}
		if err := writeZip(filepath.Join(vdir, version+".zip"), module.Version{Path: m.Path, Version: version}, root, tag, sub); err != nil {
			return fmt.Errorf("%s@%s: %w", m.Path, version, err)
		}
		if err := appendList(filepath.Join(vdir, "list"), version); err != nil {
			return err
		}
	}
	return nil
}

func writeZip(name string, mv module.Version, root, tag, sub string) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := zip.CreateFromVCS(f, mv, root, tag, sub); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func appendList(name, version string) error {
	old, err := os.ReadFile(name)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	for _, v := range strings.Fields(string(old)) {
		if v == version {
			return nil
		}
	}
	return os.WriteFile(name, append(old, []byte(version+"\n")...), 0o644)
}
