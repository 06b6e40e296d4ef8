package fluxartifact

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"io/fs"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type entry struct {
	name, body string
	mode       int64
	typ        byte
}

func entries(t *testing.T, data []byte) []entry {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(data))
	require.NoError(t, err)
	tr := tar.NewReader(gz)
	var out []entry
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		body, err := io.ReadAll(tr)
		require.NoError(t, err)
		assert.Zero(t, h.Uid+h.Gid, h.Name)
		assert.Empty(t, h.Uname+h.Gname, h.Name)
		assert.True(t, h.ModTime.Equal(time.Unix(0, 0)) || h.ModTime.IsZero(), "%s: no time (%s)", h.Name, h.ModTime)
		out = append(out, entry{h.Name, string(body), h.Mode, h.Typeflag})
	}
}

// The archive is source-controller's: directories and regular files in
// lexical order from ".", names without a trailing slash, Flux's modes,
// no owner and no time; links left out.
func TestTheArchiveIsSourceControllers(t *testing.T) {
	fsys := fstest.MapFS{
		"b/x.yaml":     {Data: []byte("x"), Mode: 0o644, ModTime: time.Now()},
		"a.yaml":       {Data: []byte("a"), Mode: 0o644},
		"b/run.sh":     {Data: []byte("#!/bin/sh"), Mode: 0o755},
		"b/c/deep.txt": {Data: []byte("deep"), Mode: 0o444},
		"link":         {Data: []byte("a.yaml"), Mode: fs.ModeSymlink | 0o777},
	}
	var buf bytes.Buffer
	require.NoError(t, writeArchive(context.Background(), &buf, fsys))
	assert.Equal(t, []entry{
		{".", "", 0o750, tar.TypeDir},
		{"a.yaml", "a", 0o600, tar.TypeReg},
		{"b", "", 0o750, tar.TypeDir},
		{"b/c", "", 0o750, tar.TypeDir},
		{"b/c/deep.txt", "deep", 0o600, tar.TypeReg},
		{"b/run.sh", "#!/bin/sh", 0o700, tar.TypeReg},
		{"b/x.yaml", "x", 0o600, tar.TypeReg},
	}, entries(t, buf.Bytes()))

	var again bytes.Buffer
	require.NoError(t, writeArchive(context.Background(), &again, fsys))
	assert.Equal(t, buf.Bytes(), again.Bytes(), "the same files, the same bytes")
}

// A file that reads other than its size fails the archive: it is never
// cut short or padded silently.
func TestAFileOfAnotherSizeFailsTheArchive(t *testing.T) {
	for name, tc := range map[string]struct {
		fsys fs.FS
		err  string
	}{
		"longer":  {liar{fstest.MapFS{"f": {Data: []byte("0123456789")}}, 4}, "its size is 4"},
		"shorter": {liar{fstest.MapFS{"f": {Data: []byte("01")}}, 4}, "its size is 4"},
	} {
		t.Run(name, func(t *testing.T) {
			err := writeArchive(context.Background(), io.Discard, tc.fsys)
			require.ErrorContains(t, err, tc.err)
		})
	}
}

// A cancelled context stops the archive.
func TestACancelledArchiveStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := writeArchive(ctx, io.Discard, fstest.MapFS{"f": {Data: []byte("x")}})
	require.ErrorIs(t, err, context.Canceled)
}

// liar reports every file's size as size.
type liar struct {
	fstest.MapFS
	size int64
}

func (l liar) ReadDir(name string) ([]fs.DirEntry, error) {
	es, err := l.MapFS.ReadDir(name)
	for i, e := range es {
		es[i] = liarEntry{e, l.size}
	}
	return es, err
}

type liarEntry struct {
	fs.DirEntry
	size int64
}

func (e liarEntry) Info() (fs.FileInfo, error) {
	fi, err := e.DirEntry.Info()
	if err != nil || fi.IsDir() {
		return fi, err
	}
	return liarInfo{fi, e.size}, nil
}

type liarInfo struct {
	fs.FileInfo
	size int64
}

func (i liarInfo) Size() int64 { return i.size }
