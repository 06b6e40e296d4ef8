package fluxartifact

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gofrs/flock"
	"k8s.io/apimachinery/pkg/util/validation"
)

// lockName is the storage's lock file, beside kindDir.
const lockName = ".lock"

// lockStorage takes the exclusive lock of the storage directory dir, a
// regular file of its own: a link or a named pipe there is refused (a
// pipe's open would not return).
func lockStorage(dir string) (*flock.Flock, error) {
	p := filepath.Join(dir, lockName)
	if fi, err := os.Lstat(p); err == nil && !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: Storage: %s is not a regular file (%s)", ErrInvalidConfig, p, fi.Mode().Type())
	}
	lock := flock.New(p, flock.SetPermissions(0o600))
	ok, err := lock.TryLock()
	if err != nil {
		return nil, fmt.Errorf("fluxartifact: lock the storage %s: %w", dir, err)
	}
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrStorageInUse, dir)
	}
	return lock, nil
}

// kindDir is the storage folder of GitRepositories' artifacts.
const kindDir = "gitrepository"

// latest is the link to an object's last artifact, as source-controller
// keeps it.
const latest = "latest.tar.gz"

// artifact is one stored tarball.
type artifact struct {
	Path   string // relative to the storage root, slash-separated
	Digest string // "sha256:<hex>"
	Size   int64
}

// storage keeps the artifacts under one directory, readable by this
// process's user only (source-controller's modes: 0700 folders, 0600
// files): they are private repositories' files.
type storage struct {
	root    *os.Root
	lock    *flock.Flock // the storage's, held while the sink is open
	records int
	ttl     time.Duration
	locks   keyedMutex // an object's folder, one writer at a time
}

// objectDir is the folder of the object's artifacts; namespace and name
// are checked as the apiserver checks them, so that it is one folder under
// the kind's.
func objectDir(namespace, name string) (string, error) {
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return "", fmt.Errorf("namespace %q: %s", namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", fmt.Errorf("name %q: %s", name, strings.Join(errs, "; "))
	}
	return path.Join(kindDir, namespace, name), nil
}

// store writes fsys's archive as file in the object's folder: written to a
// temporary file, then renamed into place, latest.tar.gz then made its
// link.
//
// A delivery given up on (ctx ended) stops, and puts nothing in place: an
// older commit's archive never replaces a newer one's as the latest.
func (s *storage) store(ctx context.Context, dir, file string, fsys fs.FS) (artifact, error) {
	if err := s.root.MkdirAll(dir, 0o700); err != nil {
		return artifact{}, err
	}
	tmp := path.Join(dir, "."+file+"."+randomSuffix()+".tmp")
	f, err := s.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return artifact{}, err
	}
	defer func() { _ = s.root.Remove(tmp) }() // gone by the rename when it worked
	h := sha256.New()
	n := &counter{}
	if err := writeArchive(ctx, io.MultiWriter(f, h, n), fsys); err != nil {
		_ = f.Close()
		return artifact{}, err
	}
	if err := f.Close(); err != nil {
		return artifact{}, err
	}
	unlock := s.locks.lock(dir)
	defer unlock()
	if err := ctx.Err(); err != nil {
		return artifact{}, err
	}
	p := path.Join(dir, file)
	if err := s.root.Rename(tmp, p); err != nil {
		return artifact{}, err
	}
	if err := s.link(dir, file); err != nil {
		return artifact{}, err
	}
	return artifact{Path: p, Digest: "sha256:" + hex.EncodeToString(h.Sum(nil)), Size: n.n}, nil
}

// link points the folder's latest.tar.gz at file.
func (s *storage) link(dir, file string) error {
	tmp := path.Join(dir, "."+latest+"."+randomSuffix()+".tmp")
	if err := s.root.Symlink(file, tmp); err != nil {
		return err
	}
	if err := s.root.Rename(tmp, path.Join(dir, latest)); err != nil {
		_ = s.root.Remove(tmp)
		return err
	}
	return nil
}

// collect removes the folder's old artifacts as source-controller does:
// those older than the TTL, then the oldest until records remain; never
// current, the link or what is not an artifact.
func (s *storage) collect(dir, current string, now time.Time) error {
	unlock := s.locks.lock(dir)
	defer unlock()
	entries, err := fs.ReadDir(s.root.FS(), dir)
	if err != nil {
		return err
	}
	type file struct {
		name string
		mod  time.Time
	}
	var files []file
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".tar.gz") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		files = append(files, file{e.Name(), info.ModTime()})
	}
	slices.SortFunc(files, func(a, b file) int { return a.mod.Compare(b.mod) })
	kept := len(files)
	var errs []error
	for _, f := range files {
		if f.name == current {
			continue
		}
		if now.Sub(f.mod) <= s.ttl && kept <= s.records {
			continue
		}
		if err := s.root.Remove(path.Join(dir, f.name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		kept--
	}
	return errors.Join(errs...)
}

// removeAll removes the object's folder.
func (s *storage) removeAll(dir string) error {
	unlock := s.locks.lock(dir)
	defer unlock()
	return s.root.RemoveAll(dir)
}

// objects lists the namespace/name of every object with a folder.
func (s *storage) objects() ([]string, error) {
	namespaces, err := fs.ReadDir(s.root.FS(), kindDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, ns := range namespaces {
		if !ns.IsDir() {
			continue
		}
		names, err := fs.ReadDir(s.root.FS(), path.Join(kindDir, ns.Name()))
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			if _, err := objectDir(ns.Name(), n.Name()); err == nil && n.IsDir() {
				out = append(out, ns.Name()+"/"+n.Name())
			}
		}
	}
	return out, nil
}

// keyedMutex is a mutex per key, kept while held.
type keyedMutex struct {
	mu   sync.Mutex
	held map[string]chan struct{}
}

// lock waits until key is free, takes it, and returns its release.
func (k *keyedMutex) lock(key string) (unlock func()) {
	unlock, _ = k.lockCtx(context.Background(), key)
	return unlock
}

// lockCtx is lock, giving up when ctx ends.
func (k *keyedMutex) lockCtx(ctx context.Context, key string) (unlock func(), err error) {
	for {
		k.mu.Lock()
		if k.held == nil {
			k.held = map[string]chan struct{}{}
		}
		c, busy := k.held[key]
		if !busy {
			c = make(chan struct{})
			k.held[key] = c
			k.mu.Unlock()
			return func() {
				k.mu.Lock()
				delete(k.held, key)
				k.mu.Unlock()
				close(c)
			}, nil
		}
		k.mu.Unlock()
		select {
		case <-c:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// handler serves the artifacts, and nothing else: no folder listing, no
// temporary file, only GET and HEAD.
func (s *storage) handler() http.Handler {
	files := http.FileServerFS(s.root.FS())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		name := path.Clean("/" + r.URL.Path)
		base := path.Base(name)
		if !strings.HasPrefix(name, "/"+kindDir+"/") || !strings.HasSuffix(base, ".tar.gz") || strings.HasPrefix(base, ".") {
			http.NotFound(w, r)
			return
		}
		if st, err := s.root.Stat(strings.TrimPrefix(name, "/")); err != nil || !st.Mode().IsRegular() {
			http.NotFound(w, r)
			return
		}
		r2 := r.Clone(r.Context())
		r2.URL.Path = name
		files.ServeHTTP(w, r2)
	})
}

type counter struct{ n int64 }

func (c *counter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}

func randomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
