package main

import (
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// newLogger is the program's logger on w, at verbosity: JSON lines as
// git-sync writes them (logr's funcr: "logger", "ts", "caller", "level",
// "msg", then the values; errors with "error"), or text key=value lines
// with --log-format=text.
func newLogger(format string, verbosity int, w io.Writer) logr.Logger {
	if format == "text" {
		return logr.FromSlogHandler(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.Level(-verbosity)}))
	}
	var mu sync.Mutex // funcr calls the func from every goroutine that logs
	return funcr.NewJSON(func(obj string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintln(w, obj)
	}, funcr.Options{LogCaller: funcr.All, LogTimestamp: true, Verbosity: verbosity})
}
