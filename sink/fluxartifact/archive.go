package fluxartifact

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"io/fs"
	"time"
)

// The modes source-controller gives an artifact's entries.
const (
	dirMode  = 0o750
	fileMode = 0o600
	exeMode  = 0o700
)

// writeArchive writes the directories and regular files of fsys to w as
// source-controller archives a checkout; other entries (symbolic links)
// are left out, as there.
func writeArchive(ctx context.Context, w io.Writer, fsys fs.FS) error {
	gw := gzip.NewWriter(w)
	tw := tar.NewWriter(gw)
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		hdr, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		sanitize(p, hdr)
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		return copyFile(ctx, tw, fsys, p, hdr.Size)
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gw.Close()
}

// copyFile writes the file p of fsys, of size bytes, to tw, while ctx
// lasts.
func copyFile(ctx context.Context, tw *tar.Writer, fsys fs.FS, p string, size int64) error {
	f, err := fsys.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.Copy(tw, io.LimitReader(ctxReader{ctx, f}, size))
	if err != nil {
		return err
	}
	// A byte past its size is a file longer than it said.
	var b [1]byte
	if k, _ := io.ReadFull(f, b[:]); n != size || k != 0 {
		return fmt.Errorf("%s: %d bytes read, its size is %d", p, n+int64(k), size)
	}
	return nil
}

// ctxReader reads r until ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// sanitize makes hdr source-controller's: its name relative to the root,
// no owner or times, the mode of its kind.
func sanitize(name string, hdr *tar.Header) {
	hdr.Name = name
	hdr.Uid, hdr.Gid = 0, 0
	hdr.Uname, hdr.Gname = "", ""
	hdr.ModTime, hdr.AccessTime, hdr.ChangeTime = time.Time{}, time.Time{}, time.Time{}
	switch mode := hdr.FileInfo().Mode(); {
	case mode.IsDir():
		hdr.Mode = dirMode
	case mode&0o111 != 0:
		hdr.Mode = exeMode
	default:
		hdr.Mode = fileMode
	}
}
