package watcher

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/safefile"
)

// Checkpoint is what a sink was last given for a target. Stores keep it
// as JSON (see MarshalJSON), its hashes as text.
type Checkpoint struct {
	// Commit is the commit delivered (or found to leave the target's tree
	// unchanged).
	Commit gitutil.Hash
	// Tree is the hash of the target's path at Commit; with Reads, a
	// digest of it and of the trees of those paths.
	Tree gitutil.Hash
	// Reads are the repository paths outside the target's path that the
	// sink's delivery read (see [Dependent]): a commit that changes one of
	// them is delivered too.
	Reads []string
	// Target is a digest of the target spec it was delivered for; a
	// different digest means the target changed and is delivered again.
	Target string
	// Time is when it was recorded.
	Time time.Time
	// Suspended says the target was suspended when last seen: gone from
	// every set while the program was down, it is forgotten, not removed
	// (see [Forgetter]).
	Suspended bool
}

// storedCheckpoint is a Checkpoint as stores keep it: its hashes in hex,
// a Tree with Reads prefixed with "r" ("" for a zero hash).
type storedCheckpoint struct {
	Commit    string    `json:"commit"`
	Tree      string    `json:"tree"`
	Reads     []string  `json:"reads,omitempty"`
	Target    string    `json:"target"`
	Time      time.Time `json:"time"`
	Suspended bool      `json:"suspended,omitempty"`
}

// readsPrefix marks a stored Tree that digests Reads too.
const readsPrefix = "r"

// MarshalJSON implements json.Marshaler: the form stores keep.
func (cp Checkpoint) MarshalJSON() ([]byte, error) {
	s := storedCheckpoint{Commit: hashText(cp.Commit), Tree: hashText(cp.Tree), Reads: cp.Reads, Target: cp.Target, Time: cp.Time, Suspended: cp.Suspended}
	if len(cp.Reads) > 0 && s.Tree != "" {
		s.Tree = readsPrefix + s.Tree
	}
	return json.Marshal(s)
}

// UnmarshalJSON implements json.Unmarshaler. A hash that is not 40
// hexadecimal digits (or "") is an error.
func (cp *Checkpoint) UnmarshalJSON(data []byte) error {
	var s storedCheckpoint
	if err := json.Unmarshal(data, &s); err != nil {
		return err
	}
	commit, err := parseHashText(s.Commit)
	if err != nil {
		return fmt.Errorf("watcher: checkpoint commit: %w", err)
	}
	tree, err := parseHashText(strings.TrimPrefix(s.Tree, readsPrefix))
	if err != nil {
		return fmt.Errorf("watcher: checkpoint tree: %w", err)
	}
	*cp = Checkpoint{Commit: commit, Tree: tree, Reads: s.Reads, Target: s.Target, Time: s.Time, Suspended: s.Suspended}
	return nil
}

// hashText is h in hex, "" for the zero hash.
func hashText(h gitutil.Hash) string {
	if h.IsZero() {
		return ""
	}
	return h.String()
}

// parseHashText is the inverse of hashText.
func parseHashText(s string) (gitutil.Hash, error) {
	if s == "" {
		return gitutil.Hash{}, nil
	}
	return gitutil.ParseHash(s)
}

// Store keeps checkpoints by key (a target ID and a sink name). Methods are
// called concurrently for different keys, never for the same key.
type Store interface {
	// Get returns the checkpoint for key; ok is false when there is none.
	Get(ctx context.Context, key string) (cp Checkpoint, ok bool, err error)
	// Put records cp for key; it returns only once cp is durable.
	Put(ctx context.Context, key string, cp Checkpoint) error
	// Delete forgets key; deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error
}

// BatchStore is a Store that reads the checkpoints of many keys in fewer
// requests than one each. A watcher whose store is one reads those of the
// targets of the remotes it starts to poll together (at start-up, or when
// it takes over a departed replica's remotes) in one GetMany, after it came
// to own them; each answers the first read of its key by the remote's
// polls, unless this watcher wrote the key since.
type BatchStore interface {
	Store
	// GetMany returns, in the order of keys, what Get would return for
	// each; an error is for all of them.
	GetMany(ctx context.Context, keys []string) ([]Lookup, error)
}

// Lookup is what [Store.Get] returns for one key.
type Lookup struct {
	Checkpoint Checkpoint
	OK         bool
	// Err is nil or wraps [ErrCheckpointUnreadable].
	Err error
}

// MemoryStore keeps checkpoints in memory: they do not survive a restart.
type MemoryStore struct {
	mu sync.Mutex
	// m holds pointers: a map's table doubles, and a Checkpoint (112
	// bytes) in each of its slots, empty ones too, costs more than a
	// pointer to one (BenchmarkMemoryStoreHeld measures a checkpoint's
	// cost, 10,000 to 100,000 of them).
	m map[string]*Checkpoint
}

var _ Store = (*MemoryStore)(nil)

// NewMemoryStore returns an empty in-memory store.
func NewMemoryStore() *MemoryStore { return &MemoryStore{m: map[string]*Checkpoint{}} }

// Get implements Store.
func (s *MemoryStore) Get(_ context.Context, key string) (Checkpoint, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.m[key]; ok {
		return *p, true, nil
	}
	return Checkpoint{}, false, nil
}

// Put implements Store.
func (s *MemoryStore) Put(_ context.Context, key string, cp Checkpoint) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.m[key]; ok {
		*p = cp // no Get's result shares it: Get returns a copy
		return nil
	}
	p := new(Checkpoint)
	*p = cp
	s.m[key] = p
	return nil
}

// Delete implements Store.
func (s *MemoryStore) Delete(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key)
	return nil
}

// FileStore keeps one small JSON file per key in a directory. Each write
// goes to a temporary file that is synced and renamed over the old one, so
// a crash mid-write leaves the previous checkpoint intact.
type FileStore struct {
	dir string
}

var _ Store = (*FileStore)(nil)

// ErrCheckpointUnreadable is returned (wrapped) by a [Store] whose record
// for a key exists but cannot be read back. The watcher treats such a
// checkpoint as absent: it reports it once and delivers the target again
// ([ReasonInitial]), which rewrites the record.
var ErrCheckpointUnreadable = errors.New("watcher: checkpoint is unreadable")

// NewFileStore returns a store in dir, creating it when needed. Temporary
// files left by a process killed mid-write are removed, and whatever else
// took their names (a directory is removed whole, a link and not what it
// names): the names are the store's.
func NewFileStore(dir string) (*FileStore, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("watcher: checkpoint store: %w", err)
	}
	leftovers, err := filepath.Glob(filepath.Join(dir, ".tmp-*"))
	if err != nil {
		return nil, fmt.Errorf("watcher: checkpoint store: %w", err)
	}
	for _, p := range leftovers {
		if err := os.RemoveAll(p); err != nil {
			return nil, fmt.Errorf("watcher: checkpoint store: %w", err)
		}
	}
	return &FileStore{dir: dir}, nil
}

type fileRecord struct {
	Key        string     `json:"key"`
	Checkpoint Checkpoint `json:"checkpoint"`
}

func (s *FileStore) path(key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(s.dir, hex.EncodeToString(sum[:16])+".json")
}

// maxCheckpointFile bounds a record read back: one holds at most reads.Max
// paths (of 4 KiB each, JSON-escaped, that is under 7 MiB) besides its
// hashes. A larger file is not one the store wrote.
const maxCheckpointFile = 8 << 20

// Get implements Store. A record that cannot be read (a directory where
// the file should be, as a missing subPath mount leaves, a disk error; a
// named pipe, a device, a symbolic link, which the store never writes, or
// a file over 8 MiB, none of which is opened for reading or followed) or
// parsed (a torn write on a file system without atomic rename) is an
// error wrapping [ErrCheckpointUnreadable]: the watcher reports it and
// treats the checkpoint as absent, so the target is delivered again and
// the record rewritten. The read stops when ctx is done.
func (s *FileStore) Get(ctx context.Context, key string) (Checkpoint, bool, error) {
	data, err := safefile.ReadFile(ctx, s.path(key), maxCheckpointFile, safefile.NoFollow)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Checkpoint{}, false, nil
	case err != nil && ctx.Err() != nil:
		return Checkpoint{}, false, fmt.Errorf("watcher: read checkpoint %s: %w", key, err)
	case err != nil:
		return Checkpoint{}, false, fmt.Errorf("%w: %s: %w", ErrCheckpointUnreadable, key, err)
	}
	var rec fileRecord
	if err := json.Unmarshal(data, &rec); err != nil || rec.Key != key {
		return Checkpoint{}, false, fmt.Errorf("%w: %s in %s", ErrCheckpointUnreadable, key, s.path(key))
	}
	return rec.Checkpoint, true, nil
}

// Put implements Store. A directory in the record's place (see Get) is
// removed first: the store's directory holds nothing else of that name.
func (s *FileStore) Put(_ context.Context, key string, cp Checkpoint) error {
	data, err := json.Marshal(fileRecord{Key: key, Checkpoint: cp})
	if err != nil {
		return err
	}
	p := s.path(key)
	if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("watcher: write checkpoint %s: a directory is in its place: %w", key, err)
		}
	}
	if err := writeAtomic(p, data); err != nil {
		return fmt.Errorf("watcher: write checkpoint %s: %w", key, err)
	}
	return nil
}

// Delete implements Store.
func (s *FileStore) Delete(_ context.Context, key string) error {
	err := os.Remove(s.path(key))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("watcher: delete checkpoint %s: %w", key, err)
	}
	return nil
}

// writeAtomic writes data to path through a synced temporary file and a
// rename, then syncs the directory.
func writeAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	if err = f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return err
	}
	// The store's directory as handed (it may be reached through a link),
	// but never a named pipe put in its place: that open would not return.
	d, err := safefile.OpenDir(dir, safefile.Follow)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
