package mirror

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/gitignore"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// Selection is the part of a repository's tree that a target watches and
// is delivered: the tree at Path, narrowed to Paths, without what Ignore
// and the ignore files in the tree match. The zero Selection is the whole
// repository.
type Selection struct {
	// Path is the root of the selection ("" the repository's root). Every
	// other field, and every path a [Mirror] reports for the selection, is
	// relative to it.
	Path string
	// Paths, when not empty, narrow the selection to these files and
	// directories under Path (Flux's sparseCheckout, Argo CD's several
	// paths): the directories on the way to them are kept, with nothing
	// else in them. Each must exist.
	Paths []string
	// Ignore hides what these patterns match, in .gitignore syntax, as if
	// they were a .gitignore file at Path (Flux's spec.ignore). Blank lines
	// and lines starting with "#" are skipped.
	Ignore []string
	// IgnoreFile, when set, is the name of the ignore files read from the
	// tree itself in each directory under Path (".sourceignore" for
	// Flux), in the same syntax; their patterns apply to their directory
	// and below and come after Ignore.
	IgnoreFile string
}

// Bounds on what a selection reads and holds: its patterns come from
// programs and repositories, and a repository is hostile until checked.
const (
	maxPatternLen   = 4 << 10
	maxPatterns     = 10_000
	maxIgnoreFile   = 1 << 20
	maxSelectPaths  = 1_000
	maxSelectMemo   = 1 << 17
	maxOverBudget   = 1 << 10
	selectionDigest = 20
)

// ErrInvalidSelection is returned (wrapped) for a selection whose paths or
// patterns cannot be used, and for an ignore file in the tree that cannot.
var ErrInvalidSelection = errors.New("mirror: invalid selection")

// Validate checks the selection without reading a tree.
func (s Selection) Validate() error {
	_, err := s.compile()
	return err
}

// plain reports whether the selection is just a path: nothing to filter.
// Roots are the paths, relative to the repository's root, under which
// the selection reads: Path, or each of Paths under it. Paths that cannot
// be cleaned are left out (Validate says why).
func (s Selection) Roots() []string {
	root, err := CleanPath(s.Path)
	if err != nil {
		return nil
	}
	if len(s.Paths) == 0 {
		return []string{root}
	}
	out := make([]string, 0, len(s.Paths))
	for _, p := range s.Paths {
		if c, err := CleanPath(p); err == nil {
			out = append(out, strings.Trim(path.Join(root, c), "/"))
		}
	}
	return out
}

func (s Selection) plain() bool {
	return len(s.Paths) == 0 && len(s.Ignore) == 0 && s.IgnoreFile == ""
}

// selector is a compiled Selection.
type selector struct {
	root     string
	paths    [][]string // none nested in another; nil selects everything
	patterns []pattern
	file     string
	id       string // digests paths, patterns and file: the memo key's part
}

func (s Selection) compile() (*selector, error) {
	root, err := CleanPath(s.Path)
	if err != nil {
		return nil, err
	}
	sel := &selector{root: root, file: s.IgnoreFile}
	if sel.file != "" && (strings.ContainsAny(sel.file, "/\\\x00") || sel.file == "." || sel.file == "..") {
		return nil, fmt.Errorf("%w: ignore file %q is not a file name", ErrInvalidSelection, sel.file)
	}
	if len(s.Paths) > maxSelectPaths {
		return nil, fmt.Errorf("%w: %d paths, at most %d", ErrInvalidSelection, len(s.Paths), maxSelectPaths)
	}
	var clean []string
	for _, p := range s.Paths {
		c, err := CleanPath(p)
		if err != nil {
			return nil, fmt.Errorf("paths: %w", err)
		}
		if c == "" {
			clean = nil // the root: everything
			break
		}
		clean = append(clean, c)
	}
	slices.Sort(clean)
	for _, c := range clean {
		if n := len(sel.paths); n > 0 && isUnder(strings.Split(c, "/"), sel.paths[n-1]) {
			continue // inside one already selected
		}
		sel.paths = append(sel.paths, strings.Split(c, "/"))
	}
	patterns, err := parsePatterns(s.Ignore, nil)
	if err != nil {
		return nil, fmt.Errorf("ignore: %w", err)
	}
	sel.patterns = patterns
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%q\x00", sel.file, sel.paths)
	for _, l := range s.Ignore {
		fmt.Fprintf(h, "%s\x00", l)
	}
	sel.id = string(h.Sum(nil)[:selectionDigest])
	return sel, nil
}

// pattern is an ignore pattern and what matching it against one element
// of a path costs (see budget).
type pattern struct {
	gitignore.Pattern
	cost int64
}

// parsePatterns parses ignore lines for the directory domain.
func parsePatterns(lines []string, domain []string) ([]pattern, error) {
	if len(lines) > maxPatterns {
		return nil, fmt.Errorf("%w: %d ignore patterns, at most %d", ErrInvalidSelection, len(lines), maxPatterns)
	}
	var out []pattern
	for _, l := range lines {
		l = strings.TrimSuffix(l, "\r")
		if len(l) > maxPatternLen {
			return nil, fmt.Errorf("%w: an ignore pattern is longer than %d bytes", ErrInvalidSelection, maxPatternLen)
		}
		if strings.ContainsAny(l, "\x00\n") {
			return nil, fmt.Errorf("%w: ignore pattern %q holds a NUL byte or a newline", ErrInvalidSelection, truncate(l, 64))
		}
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			continue
		}
		out = append(out, pattern{gitignore.ParsePattern(l, domain), 1 + int64(len(l))/patternUnit})
	}
	return out, nil
}

// ErrSelectionBudget is returned (wrapped, with [ErrInvalidSelection]) when
// evaluating a selection's ignore patterns over a tree takes more work than
// one evaluation may: patterns and ignore files within their size limits
// can still be made to cost minutes.
var ErrSelectionBudget = errors.New("mirror: the ignore patterns cost more to evaluate than their budget")

// The work one evaluation of a selection may do (a TreeHash, the paths a
// ChangedPaths keeps, one operation of a file system), in units of
// matching one element of a path against 16 bytes of a pattern (go-git's
// matcher and path.Match scan a pattern about linearly). A unit costs
// 50-60 ns of one core, on 1,000-byte patterns as on a usual .sourceignore
// (BenchmarkSelectionWork), so the budget is about 2 s; a tree of 10,000
// files under 10 usual patterns costs 0.4 M units, 100,000 files under 50
// about 20 M. ctx is looked at every budgetCheck units (about 1 ms).
const (
	patternUnit = 16
	selectWork  = 1 << 25
	budgetCheck = 1 << 14
)

// budget counts the work of one evaluation of a selection, and ends it
// when ctx ends or the work passes selectWork.
type budget struct {
	ctx   context.Context
	left  int64
	check int64
	spent int64 // for tests
}

func newBudget(ctx context.Context) *budget {
	return &budget{ctx: ctx, left: selectWork, check: budgetCheck}
}

// spend counts n units of work.
func (b *budget) spend(n int64) error {
	b.left -= n
	b.check -= n
	b.spent += n
	if b.check <= 0 {
		b.check = budgetCheck
		if err := b.ctx.Err(); err != nil {
			return fmt.Errorf("mirror: evaluating the ignore patterns: %w", err)
		}
	}
	if b.left < 0 {
		return fmt.Errorf("%w: %w (%d units of matching a path against 16 bytes of a pattern)", ErrInvalidSelection, ErrSelectionBudget, int64(selectWork))
	}
	return nil
}

// isUnder reports whether p is base or below it.
func isUnder(p, base []string) bool {
	return len(p) >= len(base) && slices.Equal(p[:len(base)], base)
}

// rules are the ignore patterns in effect in one directory: the
// selection's, then those of the ignore files from the root down to it.
type rules struct {
	patterns []pattern
	id       string // names patterns: the selection's id and the files read
}

// base is the rules at the selection's root, before its ignore file.
func (s *selector) base() rules { return rules{patterns: s.patterns, id: s.id} }

// enter returns the rules inside directory t at rel, given its parent's:
// its ignore file, if the selection reads them and it has one, adds to
// them. read reads a blob.
func (s *selector) enter(parent rules, rel []string, t *object.Tree, read func(plumbing.Hash) ([]byte, error)) (rules, error) {
	if s.file == "" {
		return parent, nil
	}
	var e *object.TreeEntry
	for i := range t.Entries {
		if t.Entries[i].Name == s.file {
			e = &t.Entries[i]
			break
		}
	}
	if e == nil || !e.Mode.IsFile() || e.Mode == filemode.Symlink {
		return parent, nil // none, or not a regular file: nothing read through a link
	}
	data, err := read(e.Hash)
	if err != nil {
		return rules{}, err
	}
	return s.parseIgnoreFile(parent, rel, data, e.Hash.String())
}

// parseIgnoreFile returns parent's rules with those of data, the ignore
// file of directory rel, added; id names data (its hash).
func (s *selector) parseIgnoreFile(parent rules, rel []string, data []byte, id string) (rules, error) {
	where := strings.Join(append(slices.Clip(rel), s.file), "/")
	if len(data) > maxIgnoreFile {
		return rules{}, fmt.Errorf("%w: %s is larger than %d bytes", ErrInvalidSelection, where, maxIgnoreFile)
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxIgnoreFile)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(parent.patterns)+len(lines) > maxPatterns {
		return rules{}, fmt.Errorf("%w: more than %d ignore patterns at %s", ErrInvalidSelection, maxPatterns, where)
	}
	ps, err := parsePatterns(lines, slices.Clone(rel))
	if err != nil {
		return rules{}, fmt.Errorf("%s: %w", where, err)
	}
	return rules{
		patterns: append(slices.Clip(parent.patterns), ps...),
		id:       parent.id + id,
	}, nil
}

// within says where rel stands against the selected paths: inside one
// (everything below is selected), or a directory on the way to one.
func (s *selector) within(rel []string) (inside, onTheWay bool) {
	if s.paths == nil {
		return true, false
	}
	for _, p := range s.paths {
		if isUnder(rel, p) {
			return true, false
		}
		if len(rel) < len(p) && slices.Equal(p[:len(rel)], rel) {
			onTheWay = true
		}
	}
	return false, onTheWay
}

// hidden reports whether the entry rel (relative to the root, in a
// directory whose rules are r) is left out, counting the work in b. Its
// parents are not checked.
func (s *selector) hidden(b *budget, r rules, rel []string, isDir bool) (bool, error) {
	inside, onTheWay := s.within(rel)
	if !inside && !(onTheWay && isDir) {
		return true, nil
	}
	for i := len(r.patterns) - 1; i >= 0; i-- {
		p := r.patterns[i]
		if err := b.spend(p.cost * int64(len(rel))); err != nil {
			return false, err
		}
		if m := p.Match(rel, isDir); m != gitignore.NoMatch {
			return m == gitignore.Exclude, nil
		}
	}
	return false, nil
}

// filters reports whether anything below a directory whose own place is
// inside can be hidden.
func (s *selector) filters(r rules) bool { return len(r.patterns) > 0 || s.file != "" }

// memoKey names the selected hash of one directory: its tree, its place
// and the rules it was entered with.
type memoKey struct {
	tree plumbing.Hash
	rel  string
	id   string
}

// selectedHash returns the hash of what the selection keeps of the tree h
// at rel (t, when not nil, is that tree decoded): the git hash of the tree
// that holds only the entries kept, each directory by its own selected
// hash. It is h itself when everything is kept, and two trees that keep
// the same files have the same hash wherever they come from, so that
// hiding a file is the same as not having it. A directory seen before
// with the same rules is not decoded again.
func (e *selEval) selectedHash(s *selector, h plumbing.Hash, t *object.Tree, rel []string, parent rules) (plumbing.Hash, error) {
	inside, _ := s.within(rel)
	if inside && !s.filters(parent) {
		return h, nil // nothing below can be hidden
	}
	key := memoKey{h, strings.Join(rel, "/"), parent.id}
	if out, ok := e.m.memoSelected(key); ok {
		return out, nil
	}
	if t == nil {
		var err error
		if t, err = e.tree(h); err != nil {
			return plumbing.ZeroHash, err
		}
	}
	r, err := s.enter(parent, rel, t, e.blob)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	var enc bytes.Buffer
	same := true
	for _, te := range t.Entries {
		sub := append(slices.Clip(rel), te.Name)
		isDir := te.Mode == filemode.Dir
		hidden, err := s.hidden(e.b, r, sub, isDir)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		if hidden {
			same = false
			continue
		}
		eh := te.Hash
		if isDir {
			if eh, err = e.selectedHash(s, te.Hash, nil, sub, r); err != nil {
				return plumbing.ZeroHash, err
			}
			same = same && eh == te.Hash
		}
		fmt.Fprintf(&enc, "%o %s\x00", te.Mode, te.Name) // as git encodes a tree
		enc.Write(eh[:])
	}
	out := h
	if !same {
		out = plumbing.ComputeHash(plumbing.TreeObject, enc.Bytes())
	}
	e.m.memoSelect(key, out)
	return out, nil
}

// blobUpTo reads a whole blob of the mirror, at most limit+1 bytes
// (fetching it into a partial mirror that lacks it); callers hold m.mu.
func (m *Mirror) blobUpTo(h plumbing.Hash, limit int64) ([]byte, error) {
	b, err := m.repo.BlobObject(h)
	if err != nil {
		return nil, m.markCorrupt(err)
	}
	r, err := b.Reader()
	if err != nil {
		return nil, m.markCorrupt(err)
	}
	defer r.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(r, limit+1)); err != nil {
		return nil, m.markCorrupt(err)
	}
	return buf.Bytes(), nil
}

// rulesAt finds the rules in effect in directory dir (relative to the
// selection's root tree root), reading the ignore files on the way; a
// directory that does not exist has its nearest existing parent's rules.
// cache, keyed by the joined path, saves the walk for siblings.
func (s *selector) rulesAt(root *object.Tree, dir []string, cache map[string]rules,
	tree func(plumbing.Hash) (*object.Tree, error), read func(plumbing.Hash) ([]byte, error)) (rules, error) {
	key := strings.Join(dir, "/")
	if r, ok := cache[key]; ok {
		return r, nil
	}
	var r rules
	t := root
	if len(dir) == 0 {
		var err error
		if r, err = s.enter(s.base(), nil, root, read); err != nil {
			return rules{}, err
		}
	} else {
		parent, err := s.rulesAt(root, dir[:len(dir)-1], cache, tree, read)
		if err != nil {
			return rules{}, err
		}
		r = parent
		// The parent's tree, found again from the root: cheap, the trees
		// are the ones just decoded.
		for _, name := range dir {
			e, err := t.FindEntry(name)
			if err != nil || e.Mode != filemode.Dir {
				t = nil
				break
			}
			if t, err = tree(e.Hash); err != nil {
				return rules{}, err
			}
		}
		if t != nil {
			if r, err = s.enter(parent, dir, t, read); err != nil {
				return rules{}, err
			}
		}
	}
	cache[key] = r
	return r, nil
}

// hiddenPath reports whether rel (a file, or a directory when isDir) is
// left out: it or a directory above it is hidden.
func (s *selector) hiddenPath(b *budget, rel []string, isDir bool, rulesAt func(dir []string) (rules, error)) (bool, error) {
	for i := 1; i <= len(rel); i++ {
		r, err := rulesAt(rel[:i-1])
		if err != nil {
			return false, err
		}
		if hidden, err := s.hidden(b, r, rel[:i], i < len(rel) || isDir); err != nil || hidden {
			return hidden, err
		}
	}
	return false, nil
}

// truncate cuts s to n bytes, marking the cut, for a message.
func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
