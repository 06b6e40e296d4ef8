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
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

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

// storage keeps the artifacts under one directory.
type storage struct {
	root    *os.Root
	records int
	ttl     time.Duration
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
func (s *storage) store(ctx context.Context, dir, file string, fsys fs.FS) (artifact, error) {
	if err := s.root.MkdirAll(dir, 0o755); err != nil {
		return artifact{}, err
	}
	tmp := path.Join(dir, "."+file+"."+randomSuffix()+".tmp")
	f, err := s.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
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
	return s.root.RemoveAll(dir)
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
