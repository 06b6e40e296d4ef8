package packcheck

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/objfile"

	"github.com/modwatch/modwatch/gitutil/internal/packidx"
	"github.com/modwatch/modwatch/internal/safefile"
)

// Packs looks for damage in a repository's packs without reading them:
// each index must be whole and name the checksum its pack ends with, and
// the pack's header must count the objects the index lists. A pack or an
// index cut short, a pack without an index (a process killed between the
// two), or a stray index is damage. A full check reads every index (about
// 30 bytes per object) and verifies its checksum; a quick one reads about
// 1 KiB of each index and 32 bytes of each pack.
func Packs(dir string, full bool) error {
	packDir := filepath.Join(dir, "objects", "pack")
	entries, err := safefile.ReadDir(packDir, safefile.NoFollow)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", packDir, err)
	}
	have := map[string]bool{}
	for _, e := range entries {
		have[e.Name()] = true
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, "pack-") {
			continue
		}
		switch base, ext := strings.TrimSuffix(name, filepath.Ext(name)), filepath.Ext(name); ext {
		case ".pack":
			if !have[base+".idx"] {
				return fmt.Errorf("pack %s has no index", name)
			}
			if err := checkPack(filepath.Join(packDir, base), full); err != nil {
				return fmt.Errorf("pack %s: %w", base, err)
			}
		case ".idx":
			if !have[base+".pack"] {
				return fmt.Errorf("index %s has no pack", name)
			}
		}
	}
	return nil
}

// checkPack checks one pack and its index, named by their common path
// without extension.
func checkPack(base string, full bool) error {
	idxFile, err := safefile.Open(base+".idx", safefile.NoFollow)
	if err != nil {
		return err
	}
	defer idxFile.Close()
	var count int64
	var packSum [20]byte
	if full {
		if count, packSum, err = VerifyIndex(idxFile); err != nil {
			return fmt.Errorf("index: %w", err)
		}
	} else if count, packSum, err = quickIndex(idxFile); err != nil {
		return fmt.Errorf("index: %w", err)
	}
	pack, err := safefile.Open(base+".pack", safefile.NoFollow)
	if err != nil {
		return err
	}
	defer pack.Close()
	st, err := pack.Stat()
	if err != nil {
		return err
	}
	const header, trailer = 12, 20
	if st.Size() < header+trailer {
		return fmt.Errorf("pack is %d bytes, too short", st.Size())
	}
	var head [header]byte
	if _, err := pack.ReadAt(head[:], 0); err != nil {
		return fmt.Errorf("pack header: %w", err)
	}
	if !bytes.Equal(head[:4], []byte("PACK")) {
		return errors.New("pack header is not PACK")
	}
	if n := binary.BigEndian.Uint32(head[8:]); int64(n) != count {
		return fmt.Errorf("pack holds %d objects, its index %d", n, count)
	}
	var sum [trailer]byte
	if _, err := pack.ReadAt(sum[:], st.Size()-trailer); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("pack trailer: %w", err)
	}
	if !bytes.Equal(sum[:], packSum[:]) {
		return errors.New("pack does not end with the checksum its index names (cut short?)")
	}
	return nil
}

// VerifyIndex reads a version 2 index through, in constant memory (not
// decoded into go-git's index, which costs about 30 bytes per object of
// the repository at every open): its fanout must not decrease, its names must
// ascend, each large offset must be in its table, and its checksum must be
// that of its content. It returns the object count and the pack checksum.
func VerifyIndex(f *os.File) (count int64, packSum [20]byte, err error) {
	count, large, packSum, err := indexHead(f)
	if err != nil {
		return 0, packSum, err
	}
	st, err := f.Stat()
	if err != nil {
		return 0, packSum, err
	}
	sum := sha1.New()
	r := bufio.NewReaderSize(io.TeeReader(io.NewSectionReader(f, 0, st.Size()-20), sum), 16<<10)
	var buf [packidx.HeaderSize + packidx.FanoutSize]byte // checked by indexHead; read again for the checksum
	if _, err := io.ReadFull(r, buf[:]); err != nil {
		return 0, packSum, err
	}
	var name, last [20]byte
	for i := range count {
		if _, err := io.ReadFull(r, name[:]); err != nil {
			return 0, packSum, err
		}
		if i > 0 && bytes.Compare(last[:], name[:]) >= 0 {
			return 0, packSum, fmt.Errorf("object names out of order at %d", i)
		}
		if int(name[0]) > 0 && int64(binary.BigEndian.Uint32(buf[packidx.HeaderSize+4*(int(name[0])-1):])) > i ||
			int64(binary.BigEndian.Uint32(buf[packidx.HeaderSize+4*int(name[0]):])) <= i {
			return 0, packSum, fmt.Errorf("object %d is not where the fanout puts it", i)
		}
		last = name
	}
	if _, err := r.Discard(int(count) * 4); err != nil { // CRCs
		return 0, packSum, err
	}
	var off [8]byte
	for range count {
		if _, err := io.ReadFull(r, off[:4]); err != nil {
			return 0, packSum, err
		}
		if o := binary.BigEndian.Uint32(off[:4]); o&(1<<31) != 0 && int64(o&^(1<<31)) >= large {
			return 0, packSum, fmt.Errorf("offset %d is past the large offsets (%d)", o&^(1<<31), large)
		}
	}
	if _, err := io.Copy(io.Discard, r); err != nil { // large offsets, pack checksum
		return 0, packSum, err
	}
	var want [20]byte
	if _, err := f.ReadAt(want[:], st.Size()-20); err != nil {
		return 0, packSum, err
	}
	if !bytes.Equal(sum.Sum(nil), want[:]) {
		return 0, packSum, errors.New("checksum mismatch")
	}
	return count, packSum, nil
}

// quickIndex reads the object count and the pack checksum of a version 2
// index, and checks that its size fits that count.
func quickIndex(f *os.File) (count int64, packSum [20]byte, err error) {
	count, _, packSum, err = indexHead(f)
	return count, packSum, err
}

// indexHead reads the header and fanout of an index and checks them
// against its size (see packidx.Layout); it returns the object count, the
// count of 8-byte offsets and the pack checksum.
func indexHead(f *os.File) (count, large int64, packSum [20]byte, err error) {
	st, err := f.Stat()
	if err != nil {
		return 0, 0, packSum, err
	}
	var head [packidx.HeaderSize + packidx.FanoutSize]byte
	if _, err := f.ReadAt(head[:], 0); err != nil {
		return 0, 0, packSum, fmt.Errorf("header: %w", err)
	}
	if count, large, err = packidx.Layout(head[:], st.Size()); err != nil {
		return 0, 0, packSum, err
	}
	if _, err := f.ReadAt(packSum[:], st.Size()-packidx.TrailerSize); err != nil {
		return 0, 0, packSum, fmt.Errorf("trailer: %w", err)
	}
	return count, large, packSum, nil
}

// PackSum checks that a pack's content hashes to the SHA-1 it ends
// with: one flipped byte anywhere is found.
func PackSum(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() < 12+20 {
		return fmt.Errorf("pack is %d bytes, too short", fi.Size())
	}
	sum := sha1.New()
	if _, err := io.Copy(sum, io.NewSectionReader(f, 0, fi.Size()-20)); err != nil {
		return err
	}
	var want [20]byte
	if _, err := f.ReadAt(want[:], fi.Size()-20); err != nil {
		return err
	}
	if !bytes.Equal(sum.Sum(nil), want[:]) {
		return errors.New("content does not match its checksum")
	}
	return nil
}

// Loose checks that a loose object inflates to content whose hash is
// its name.
func Loose(f *os.File, h plumbing.Hash) error {
	r, err := objfile.NewReader(f)
	if err != nil {
		return err
	}
	defer r.Close()
	if _, _, err := r.Header(); err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		return err
	}
	if got := r.Hash(); got != h {
		return fmt.Errorf("content hashes to %s", got)
	}
	return nil
}
