// Package upstream finds the users' own artifacts that the project's
// fixtures are compared with and its tests run on: Numaplane's CRD,
// configuration and agent samples, git-sync's end-to-end suite. They live
// outside the repository, in ../shared/upstream beside it (where the
// project's checkouts and CI have them), or where $MODWATCH_UPSTREAM says.
package upstream

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

// Path returns the path of the artifact rel ("numaplane/config/...").
func Path(rel string) (string, error) {
	dir := os.Getenv("MODWATCH_UPSTREAM")
	if dir == "" {
		root, err := RepoRoot()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(filepath.Dir(root), "shared", "upstream")
	}
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("upstream: the users' artifact %s is not there (set MODWATCH_UPSTREAM to the folder that holds them): %w", rel, err)
	}
	return p, nil
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

// ConfigFile returns the config.yaml of the ConfigMap in the artifact rel,
// as a program mounting that ConfigMap reads it.
func ConfigFile(rel string) ([]byte, error) {
	p, err := Path(rel)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
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
