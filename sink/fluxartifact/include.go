package fluxartifact

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"

	"github.com/modwatch/modwatch/gitutil/mirror"
	"github.com/modwatch/modwatch/watcher"
	"github.com/modwatch/modwatch/watcher/payload"
)

// Flux's reasons for an include that cannot be put in (source-controller's
// reconcileInclude): its path, or the copy.
const (
	reasonIllegalPath = "IllegalPath"
	reasonCopyFailure = "CopyFailure"
)

// Bounds on what an included artifact may unpack to: its archive was
// stored here, but the storage directory is disk, and disk is hostile
// until checked.
const (
	maxIncludeBytes   = 4 << 30
	maxIncludeEntries = 1 << 20
)

// includeError is an include that cannot be put in, with Flux's reason.
type includeError struct {
	reason string
	err    error
}

func (e *includeError) Error() string { return e.err.Error() }
func (e *includeError) Unwrap() error { return e.err }

// artifactFile is the name source-controller and this sink give an
// artifact: its commit's hash.
var artifactFile = regexp.MustCompile(`^[0-9a-f]{40}(?:[0-9a-f]{24})?\.tar\.gz$`)

// withIncludes returns the tree c's target delivers with repo's includes
// put in, as source-controller copies them into its checkout before it
// archives it: each included artifact's FromPath at its ToPath, in order,
// as source-controller's rename puts it there (a file replaces a file,
// nothing a directory), and then the target's selection applied to the
// whole, the included files' ignore files read too. The artifacts are
// this sink's own, read from its storage and checked against their
// digests. done removes what was unpacked.
func (s *Sink) withIncludes(ctx context.Context, c watcher.Change, repo payload.GitRepository) (fsys fs.FS, done func(), err error) {
	if c.Root == nil {
		return nil, nil, fmt.Errorf("fluxartifact: GitRepository %s: the change has no Root to put its includes in", repo.Key())
	}
	tmp, err := os.MkdirTemp("", "fluxartifact-include-")
	if err != nil {
		return nil, nil, err
	}
	cleanup := func() { _ = os.RemoveAll(tmp) }
	defer func() {
		if err != nil {
			cleanup()
		}
	}()
	sel := c.Target.Selection()
	base, err := sparse(ctx, c.Root, sel)
	if err != nil {
		return nil, nil, err
	}
	o := newOverlay(base)
	budget := &unpackBudget{bytes: maxIncludeBytes, entries: maxIncludeEntries} // all the includes' together
	for i, inc := range repo.Includes {
		if err := inc.Validate(); err != nil {
			return nil, nil, &includeError{reasonIllegalPath, err}
		}
		dir := filepath.Join(tmp, strconv.Itoa(i))
		if err := s.unpack(ctx, repo.Namespace, inc, dir, budget); err != nil {
			return nil, nil, err
		}
		if err := o.put(os.DirFS(dir), cleanRel(inc.FromPath), cleanRel(inc.At())); err != nil {
			return nil, nil, &includeError{reasonCopyFailure, fmt.Errorf("failed to copy '%s' include from %s to %s: %w", inc.Name, inc.FromPath, inc.At(), err)}
		}
	}
	fsys, err = mirror.Selection{Ignore: sel.Ignore, IgnoreFile: sel.IgnoreFile}.FS(ctx, o)
	if err != nil {
		return nil, nil, err
	}
	return fsys, cleanup, nil
}

// sparse is what source-controller's checkout of root holds for sel, the
// tree the includes are put into: sel's Path, narrowed to its Paths
// (Flux's sparseCheckout), its ignore rules not yet applied (they apply
// to the includes too).
func sparse(ctx context.Context, root fs.FS, sel mirror.Selection) (fs.FS, error) {
	if len(sel.Paths) == 0 {
		if sel.Path == "" {
			return root, nil
		}
		return fs.Sub(root, sel.Path)
	}
	return mirror.Selection{Path: sel.Path, Paths: sel.Paths}.FS(ctx, root)
}

// cleanRel is p as a path inside a directory, as securejoin reads it:
// ".." stops at the top.
func cleanRel(p string) string {
	c := path.Clean("/" + p)[1:]
	if c == "" {
		return "."
	}
	return c
}

// unpack unpacks the artifact inc names, of the GitRepository inc.Name in
// namespace ns, into dir: the file of this sink's storage its path names,
// its digest checked, its bytes taken from budget.
func (s *Sink) unpack(ctx context.Context, ns string, inc payload.GitRepositoryInclude, dir string, budget *unpackBudget) error {
	objDir, err := objectDir(ns, inc.Name)
	if err != nil {
		return &includeError{reasonIllegalPath, err}
	}
	name := path.Base(inc.Artifact.Path)
	if inc.Artifact.Path != path.Join(objDir, name) || !artifactFile.MatchString(name) {
		return fmt.Errorf("fluxartifact: include '%s': its artifact %q is not one this sink stores", inc.Name, inc.Artifact.Path)
	}
	f, err := s.store.root.Open(inc.Artifact.Path)
	if err != nil {
		return fmt.Errorf("fluxartifact: include '%s': its artifact: %w", inc.Name, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("fluxartifact: include '%s': its artifact %s is not a regular file", inc.Name, inc.Artifact.Path)
	}
	h := sha256.New()
	if err := untar(ctx, io.TeeReader(f, h), dir, budget); err != nil {
		return fmt.Errorf("fluxartifact: include '%s': unpacking its artifact: %w", inc.Name, err)
	}
	if _, err := io.Copy(h, f); err != nil { // what follows the archive is in the digest too
		return err
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != inc.Artifact.Digest {
		return fmt.Errorf("fluxartifact: include '%s': its artifact %s has digest %s, its status says %s", inc.Name, inc.Artifact.Path, got, inc.Artifact.Digest)
	}
	return nil
}

// unpackBudget is what unpacking may still write: bytes and entries.
type unpackBudget struct{ bytes, entries int64 }

// untar unpacks a gzipped archive of directories and regular files into
// dir, which it makes, within budget and while ctx lasts.
func untar(ctx context.Context, r io.Reader, dir string, budget *unpackBudget) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	gz, err := gzip.NewReader(r)
	if err != nil {
		return err
	}
	tr := tar.NewReader(gz)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(hdr.Name)
		if name == "." && hdr.Typeflag == tar.TypeDir {
			continue // the root, as source-controller archives it
		}
		if budget.entries--; budget.entries < 0 {
			return fmt.Errorf("more than %d entries included", maxIncludeEntries)
		}
		if !fs.ValidPath(name) || name == "." {
			return fmt.Errorf("entry %q: not a path inside the archive", hdr.Name)
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o700); err != nil {
				return err
			}
		case tar.TypeReg:
			if budget.bytes -= hdr.Size; hdr.Size < 0 || budget.bytes < 0 {
				return fmt.Errorf("more than %d bytes included", int64(maxIncludeBytes))
			}
			if err := writeEntry(ctx, root, name, hdr, tr); err != nil {
				return err
			}
		default:
			return fmt.Errorf("entry %q: type %q is neither a directory nor a regular file", hdr.Name, hdr.Typeflag)
		}
	}
}

// writeEntry writes the regular file hdr of tr at name in root, its
// directory made, executable when it was.
func writeEntry(ctx context.Context, root *os.Root, name string, hdr *tar.Header, tr io.Reader) error {
	if err := root.MkdirAll(path.Dir(name), 0o700); err != nil {
		return err
	}
	mode := os.FileMode(0o600)
	if hdr.Mode&0o100 != 0 {
		mode = 0o700
	}
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, ctxReader{ctx, io.LimitReader(tr, hdr.Size)})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != hdr.Size {
		err = fmt.Errorf("entry %q: %d bytes of %d", hdr.Name, n, hdr.Size)
	}
	return err
}
