package mirror

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/format/objfile"

	"github.com/modwatch/modwatch/gitutil/internal/packidx"
	"github.com/modwatch/modwatch/internal/safefile"
)

// checkPacks looks for damage in a mirror's packs without reading them:
// each index must be whole and name the checksum its pack ends with, and
// the pack's header must count the objects the index lists. A pack or an
// index cut short, a pack without an index (a process killed between the
// two), or a stray index is damage. A full check reads every index (about
// 30 bytes per object) and verifies its checksum; a quick one reads about
// 1 KiB of each index and 32 bytes of each pack.
func checkPacks(dir string, full bool) error {
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
		if count, packSum, err = verifyIndex(idxFile); err != nil {
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

// verifyIndex reads a version 2 index through, in constant memory (not
// decoded into go-git's index, which costs about 30 bytes per object of
// the mirror at every open): its fanout must not decrease, its names must
// ascend, each large offset must be in its table, and its checksum must be
// that of its content. It returns the object count and the pack checksum.
func verifyIndex(f *os.File) (count int64, packSum [20]byte, err error) {
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

// damage decides whether err, from an operation on the mirror, was caused
// by what is on disk, and returns why (nil: it was not). It is the one
// place that decides it; see judge.
func (m *Mirror) damage(err error) error {
	return judge(err, func() error { return m.verifyAfter(err) })
}

// verifyAfter is the verification that follows err. The pack a read
// failed in is verified whole again, as verified as it may look; then,
// should the store verify, the object is read again, on a view of its
// own, from the disk: the same failure twice is damage, whatever the
// pack's checksum says (a pack can be written wrong and summed right).
func (m *Mirror) verifyAfter(err error) error {
	var re *readError
	if !errors.As(err, &re) {
		return m.verifyStore()
	}
	if !re.pack.IsZero() {
		delete(m.verified, filepath.Join(m.dir, "objects", "pack", "pack-"+re.pack.String()+".pack"))
	}
	if verr := m.verifyStore(); verr != nil {
		return verr
	}
	if rerr := m.reread(re.object); rerr != nil {
		return fmt.Errorf("read again: %w", rerr)
	}
	return nil
}

// reread reads object h whole from a view of its own and returns what
// failed in its content (nil when it reads, or when the view cannot be
// opened: that says nothing of h). Callers hold m.mu.
func (m *Mirror) reread(h plumbing.Hash) error {
	v, err := newPackView(m.dir, &m.indexes, nil, new(atomic.Int64), newObjectLRU(cache.MiByte), false)
	if err != nil {
		return nil
	}
	defer v.Close()
	size, err := v.EncodedObjectSize(h)
	if err == nil {
		var o plumbing.EncodedObject
		if o, err = v.object(h); err == nil {
			err = readWhole(o, size)
		}
	}
	var re *readError
	if errors.As(err, &re) {
		return err
	}
	return nil
}

// readWhole reads o to its end, and fails if it has not size bytes.
func readWhole(o plumbing.EncodedObject, size int64) error {
	r, err := o.Reader()
	if err != nil {
		return err
	}
	defer r.Close()
	n, err := io.Copy(io.Discard, r)
	if err == nil && n != size {
		err = &readError{object: o.Hash(), err: fmt.Errorf("%w: %d bytes, its header says %d", errMismatch, n, size)}
	}
	return err
}

// judge is the damage decision, apart from the store it verifies:
//   - a stop (ctx), the remote's answer or the network's, and what is the
//     target's own (a ref that names a tree: [ErrNotCommit]; a commit the
//     mirror lacks; a selection, its budget or a path) are never damage,
//     and nothing is verified for them;
//   - an object that another object of the store names, and that no pack
//     and no loose object holds, is damage: the store is incomplete;
//   - anything else (a decompression or checksum error, a short read, an
//     I/O error, a fault reading a mapped index, a malformed index) is
//     damage when verify, the store's own verification, finds some, and
//     is not otherwise: rebuilding a store that verifies would change
//     nothing.
func judge(err error, verify func() error) error {
	switch {
	case err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		isRemoteError(err) || isNetworkError(err):
		return nil
	case errors.Is(err, ErrNotCommit) || errors.Is(err, ErrCommitNotFound) || errors.Is(err, ErrRebuilt) ||
		errors.Is(err, ErrInvalidSelection) || errors.Is(err, ErrPathNotFound) || errors.Is(err, ErrSymlinkEscape) ||
		errors.Is(err, ErrNotFetched) || errors.Is(err, ErrBadTree):
		return nil
	case errors.Is(err, plumbing.ErrObjectNotFound):
		return fmt.Errorf("an object the store names is missing: %w", err)
	}
	if verr := verify(); verr != nil {
		return fmt.Errorf("%w (verified after: %v)", verr, err)
	}
	return nil
}

// isNetworkError tells errors of a connection: what the remote or the
// network did, never the disk. (Not net.Error: a syscall.Errno, EIO
// included, is one.)
func isNetworkError(err error) bool {
	var oerr *net.OpError
	var derr *net.DNSError
	var uerr *url.Error
	return errors.As(err, &oerr) || errors.As(err, &derr) || errors.As(err, &uerr)
}

// fileStamp is what a verified file looked like: one whose size or
// modification time changed since (a byte written into it) is verified
// again.
type fileStamp struct {
	size  int64
	mtime time.Time
}

func stampOf(fi os.FileInfo) fileStamp { return fileStamp{fi.Size(), fi.ModTime()} }

// verifyStore is the store's own verification: every index whole and
// naming its pack (checkPacks), every pack's content matching the SHA-1
// it ends with, and every loose object inflating to the content its name
// is the hash of. Files verified before and unchanged since are not read
// again, so that an error that is not damage, repeated, costs a listing.
// Callers hold m.mu.
func (m *Mirror) verifyStore() error {
	if err := checkPacks(m.dir, true); err != nil {
		return err
	}
	if m.verified == nil {
		m.verified = map[string]fileStamp{}
	}
	packDir := filepath.Join(m.dir, "objects", "pack")
	for name := range packNames(m.dir) {
		p := filepath.Join(packDir, name+".pack")
		if err := m.verifyOnce(p, verifyPackSum); err != nil {
			return fmt.Errorf("pack %s: %w", name, err)
		}
	}
	objects := filepath.Join(m.dir, "objects")
	dirs, err := os.ReadDir(objects)
	if err != nil {
		return fmt.Errorf("read %s: %w", objects, err)
	}
	for _, d := range dirs {
		if !d.IsDir() || len(d.Name()) != 2 {
			continue
		}
		files, err := os.ReadDir(filepath.Join(objects, d.Name()))
		if err != nil {
			return fmt.Errorf("read %s: %w", d.Name(), err)
		}
		for _, f := range files {
			h := d.Name() + f.Name()
			if !plumbing.IsHash(h) {
				continue
			}
			verify := func(file *os.File) error { return verifyLoose(file, plumbing.NewHash(h)) }
			if err := m.verifyOnce(filepath.Join(objects, d.Name(), f.Name()), verify); err != nil {
				return fmt.Errorf("loose object %s: %w", h, err)
			}
		}
	}
	return nil
}

// verifyOnce verifies the file at path with check, unless it was verified
// as it is now.
func (m *Mirror) verifyOnce(path string, check func(*os.File) error) error {
	f, err := safefile.Open(path, safefile.NoFollow)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if m.verified[path] == stampOf(fi) {
		return nil
	}
	if err := check(f); err != nil {
		delete(m.verified, path)
		return err
	}
	m.verified[path] = stampOf(fi)
	return nil
}

// verifyPackSum checks that a pack's content hashes to the SHA-1 it ends
// with: one flipped byte anywhere is found.
func verifyPackSum(f *os.File) error {
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

// verifyLoose checks that a loose object inflates to content whose hash is
// its name.
func verifyLoose(f *os.File, h plumbing.Hash) error {
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
