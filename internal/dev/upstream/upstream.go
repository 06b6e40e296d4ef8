// Package upstream holds the project's fixtures of the users' own
// artifacts (Numaplane's controller and agent configuration samples, in
// testdata/, written here in the form of the originals) and finds the
// originals they are compared with: outside the repository, in
// ../shared/upstream beside it (where the project's checkouts and CI have
// them), or where $MODWATCH_UPSTREAM says. Tests run on the fixtures; a
// comparison with an original runs where the original is and skips,
// saying so, where it is not.
package upstream

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

//go:embed testdata
var fixtures embed.FS

// ErrAbsent is returned by Path when the original artifact is not there.
var ErrAbsent = errors.New("upstream: the users' artifact is not here")

// Dir returns the folder of the original artifacts: $MODWATCH_UPSTREAM, or
// ../shared/upstream beside the repository.
func Dir() (string, error) {
	if dir := os.Getenv("MODWATCH_UPSTREAM"); dir != "" {
		return dir, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(root), "shared", "upstream"), nil
}

// Path returns the path of the original artifact rel
// ("numaplane/config/..."), or an error wrapping ErrAbsent.
func Path(rel string) (string, error) {
	dir, err := Dir()
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%w: %s (%v)", ErrAbsent, rel, err)
	}
	return p, nil
}

// SkipMessage is what a comparison with the original rel says when it
// does not run.
func SkipMessage(rel string) string {
	return "SKIP comparison with the users' artifact " + rel + ": not in ../shared/upstream; set MODWATCH_UPSTREAM to the folder that holds it"
}

// TB is the part of testing.TB that Require uses.
type TB interface {
	Helper()
	Skip(args ...any)
	Fatal(args ...any)
}

// Require returns the path of the original artifact rel; where it is not
// there, the test is skipped with SkipMessage; any other error fails it.
func Require(t TB, rel string) string {
	t.Helper()
	p, err := Path(rel)
	if errors.Is(err, ErrAbsent) {
		t.Skip(SkipMessage(rel))
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Fixtures returns the names of the project's fixtures, by the path of the
// original each has the form of ("numaplane/config/manager/...").
func Fixtures() ([]string, error) {
	var names []string
	err := fs.WalkDir(fixtures, "testdata", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, p[len("testdata/"):])
		}
		return err
	})
	return names, err
}

// Fixture returns the project's fixture in the form of the original rel.
func Fixture(rel string) ([]byte, error) {
	return fixtures.ReadFile("testdata/" + rel)
}

// FixtureConfig returns the config.yaml of the fixture's ConfigMap, as a
// program mounting that ConfigMap reads it.
func FixtureConfig(rel string) ([]byte, error) {
	data, err := Fixture(rel)
	if err != nil {
		return nil, err
	}
	return ConfigOf(rel, data)
}

// ConfigFile returns the config.yaml of the original's ConfigMap.
func ConfigFile(rel string) ([]byte, error) {
	p, err := Path(rel)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	return ConfigOf(rel, data)
}

// ConfigOf returns the config.yaml of the ConfigMap data (named rel in
// errors).
func ConfigOf(rel string, data []byte) ([]byte, error) {
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(data, &cm); err != nil {
		return nil, fmt.Errorf("upstream: %s: %w", rel, err)
	}
	config, ok := cm.Data["config.yaml"]
	if !ok {
		return nil, fmt.Errorf("upstream: %s has no config.yaml", rel)
	}
	return []byte(config), nil
}

// RepoRoot walks up from the working directory to the root of the
// repository: the directory of the github.com/modwatch/modwatch module.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(bytes.TrimSpace(data), []byte("module github.com/modwatch/modwatch\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("upstream: no github.com/modwatch/modwatch go.mod above the working directory")
		}
		dir = parent
	}
}
