// Package loglevel turns Numaplane's logLevel key, which its controller's
// and its agent's configurations share, into a slog level (the library
// leaves a program's logging to the program).
package loglevel

import (
	"fmt"
	"log/slog"

	"sigs.k8s.io/yaml"
)

// Set sets level from logLevel (0 info, each step one more logr V level);
// nil (the key not said) leaves level as it is. A negative logLevel is
// refused by the configuration's parser before it gets here.
func Set(level *slog.LevelVar, logLevel *int) {
	if logLevel != nil && level != nil {
		level.Set(slog.Level(-*logLevel))
	}
}

// Parse reads logLevel from a configuration file's content, for a program
// that names it as its own key (the agent's): nil when the file does not
// say; an error for a value that is not a non-negative integer.
func Parse(data []byte) (*int, error) {
	var own struct {
		LogLevel *int `json:"logLevel"`
	}
	if err := yaml.Unmarshal(data, &own); err != nil {
		return nil, fmt.Errorf("logLevel: %w", err)
	}
	if own.LogLevel != nil && *own.LogLevel < 0 {
		return nil, fmt.Errorf("logLevel %d is negative", *own.LogLevel)
	}
	return own.LogLevel, nil
}
