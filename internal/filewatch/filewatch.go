package filewatch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"

	"github.com/modwatch/modwatch/internal/safefile"
)

// MaxSize bounds the file Watch reads: a ConfigMap or a Secret holds at
// most 1 MiB; a file a user writes gets room to spare.
const MaxSize = 4 << 20

// Watch calls onChange with the content of the file at path when it
// starts and each time the content changes, until ctx is done; err is
// fs.ErrNotExist (wrapped) while there is no file, or why it could not be
// read. It watches the file's directory with fsnotify, so that it sees the
// file replaced in any way (the kubelet's ..data symlink swap, an editor's
// rename, a plain write), and reads the file once the directory has been
// quiet for debounce. It fails at once when the directory cannot be
// watched. onChange is called from WatchFile's goroutine.
//
// The file is read with safefile's checks, following links (the kubelet
// mounts keys as links through ..data): a named pipe, a device or a
// directory is refused without being waited on or read, so is a file over
// MaxSize; err then wraps safefile.ErrRefused, and Watch goes on.
func Watch(ctx context.Context, path string, debounce time.Duration, log logr.Logger, onChange func(data []byte, err error)) error {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("filewatch: %w", err)
	}
	defer fw.Close()
	dir := filepath.Dir(path)
	if err := fw.Add(dir); err != nil {
		return fmt.Errorf("filewatch: watch %s: %w", dir, err)
	}

	var f file
	reload := func() { f.reload(ctx, path, onChange) }
	reload()
	timer := time.NewTimer(debounce)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-fw.Events:
			if !ok {
				return nil
			}
			// Any event in the directory may be the file changing (through a
			// symlink swap it is not even named): read it once things settle.
			timer.Reset(debounce)
		case err, ok := <-fw.Errors:
			if !ok {
				return nil
			}
			// An overflow loses events: read the file to be sure.
			log.Error(err, "watching a file", "dir", dir)
			timer.Reset(debounce)
		case <-timer.C:
			reload()
		}
	}
}

// file is what Watch last read.
type file struct {
	read    bool   // the file was read at least once
	missing bool   // it was missing then
	last    []byte // what was read
}

// reload reads the file at path and hands onChange what changed.
func (f *file) reload(ctx context.Context, path string, onChange func(data []byte, err error)) {
	data, err := safefile.ReadFile(ctx, path, MaxSize, safefile.Follow)
	switch {
	case err != nil && ctx.Err() != nil:
		return // stopped: not a change
	case errors.Is(err, fs.ErrNotExist):
		if f.read && f.missing {
			return
		}
		f.read, f.missing, f.last = true, true, nil
	case err != nil:
	case f.read && !f.missing && bytes.Equal(data, f.last):
		return
	default:
		f.read, f.missing, f.last = true, false, data
	}
	onChange(data, err)
}
