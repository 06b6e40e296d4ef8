package cachedir

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"time"
)

// mirrorName matches the directories of mirrors (see MirrorName); nothing
// else in the cache directory is ever collected.
var mirrorName = regexp.MustCompile(`^[0-9a-f]{24}$`)

// gcSuffix marks a mirror being removed; a killed process's are cleared by
// Open.
const gcSuffix = ".gc"

// TouchesPerGrace: a polled mirror's time is at most a
// grace/TouchesPerGrace old, so a killed process's mirrors last at least
// 7/8 of the grace.
const TouchesPerGrace = 8

// MirrorName is the name of the directory of the mirror named key, in the
// cache directory.
func MirrorName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:12])
}

// Touch records that the mirror in dir is in use, as its directory's
// modification time, which survives restarts. A remote does so when it
// ends, and when it polls if it has not for TouchesPerGrace of the grace:
// a system call on every poll is 8% of a no-change poll's CPU.
func Touch(dir string) {
	now := time.Now()
	_ = os.Chtimes(dir, now, now)
}

// Unused renames the mirrors that used does not name (by directory name)
// and that were last used longer ago than grace, so that none is opened
// meanwhile, and returns their new paths, to remove. The caller holds
// what opens mirrors, and removes them without it: a large mirror takes
// a while.
func (c *Dir) Unused(used map[string]bool, grace time.Duration) ([]string, error) {
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var doomed []string
	for _, e := range entries {
		if !e.IsDir() || !mirrorName.MatchString(e.Name()) || used[e.Name()] {
			continue
		}
		info, err := e.Info()
		if err != nil || now.Sub(info.ModTime()) < grace {
			continue
		}
		dir := filepath.Join(c.dir, e.Name())
		if err := os.Rename(dir, dir+gcSuffix); err == nil {
			doomed = append(doomed, dir+gcSuffix)
		}
	}
	return doomed, nil
}
