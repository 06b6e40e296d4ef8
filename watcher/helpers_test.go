package watcher_test

import (
	"io/fs"

	"github.com/modwatch/modwatch/watcher"
)

func readFile(c watcher.Change, name string) (string, error) {
	b, err := fs.ReadFile(c.FS, name)
	return string(b), err
}
