// Package loglevel reads Numaplane's logLevel key, which its controller's
// and its agent's configurations share and which the programs read
// themselves (the library leaves a program's logging to the program).
package loglevel

import (
	"fmt"
	"log/slog"

	"sigs.k8s.io/yaml"
)

// Set reads logLevel (0 info, higher more verbose, as logr's V levels)
// from a configuration file's content into level; a file without it
// leaves level as it is.
func Set(level *slog.LevelVar, data []byte) error {
	var own struct {
		LogLevel *int `json:"logLevel"`
	}
	if err := yaml.Unmarshal(data, &own); err != nil {
		return fmt.Errorf("logLevel: %w", err)
	}
	if own.LogLevel == nil || level == nil {
		return nil
	}
	if *own.LogLevel < 0 {
		return fmt.Errorf("logLevel %d is negative", *own.LogLevel)
	}
	level.Set(slog.Level(-*own.LogLevel))
	return nil
}
