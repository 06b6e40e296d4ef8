package repocheck_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// snippet is a ```go block of the README and the file it must come from.
var snippet = regexp.MustCompile("(?s)(?:<!-- compiled: (\\S+) -->\n)?```go\n(.*?)```")

// TestReadmeSnippetsAreCompiled holds README.md and every guide under
// docs/ to it.
func TestReadmeSnippetsAreCompiled(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	for _, name := range append([]string{filepath.Join(root, "README.md")}, docs...) {
		t.Run(filepath.Base(name), func(t *testing.T) { checkSnippets(t, root, name) })
	}
}

func checkSnippets(t *testing.T, root, name string) {
	readme, err := os.ReadFile(name)
	require.NoError(t, err)
	blocks := snippet.FindAllStringSubmatch(string(readme), -1)
	for i, b := range blocks {
		file, code := b[1], b[2]
		if !assert.NotEmpty(t, file, "go block %d has no <!-- compiled: path --> line above it:\n%s", i+1, code) {
			continue
		}
		src, err := os.ReadFile(filepath.Join(root, file))
		if !assert.NoError(t, err, "go block %d", i+1) {
			continue
		}
		assert.True(t, strings.HasSuffix(file, "_test.go"), "%s: a snippet comes from a test or an example", file)
		assert.True(t, contains(lines(string(src)), lines(code)), "go block %d is not a verbatim excerpt of %s:\n%s", i+1, file, code)
	}
}

// lines returns the non-blank lines of s, trimmed.
func lines(s string) []string {
	var out []string
	for l := range strings.Lines(s) {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// contains reports whether part appears in whole as a run of lines.
func contains(whole, part []string) bool {
	for i := 0; i+len(part) <= len(whole); i++ {
		if equal(whole[i:i+len(part)], part) {
			return true
		}
	}
	return false
}

func equal(a, b []string) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Every package of the repository is named by its folder: one a program
// imports (or a program) in the README's package table, an internal one
// (tests, benchmarks, tools) in docs/internals.md, so that a newcomer
// finds each one and a user's README holds only what a user needs.
func TestEveryPackageIsNamedWhereItsReadersLook(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	readme := section(t, filepath.Join(root, "README.md"), "## Packages and programs\n")
	internals := section(t, filepath.Join(root, "docs", "internals.md"), "# The internal packages\n")
	var missing, misplaced []string
	require.NoError(t, filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && rel != "." || d.Name() == "testdata" || d.Name() == "bench-results") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		if dir == "." || slices.Contains(missing, dir) || slices.Contains(misplaced, dir) {
			return nil
		}
		want, other := readme, internals
		if dir == "internal" || strings.HasPrefix(dir, "internal/") || strings.Contains(dir, "/internal/") || strings.HasSuffix(dir, "/internal") {
			want, other = internals, readme
		}
		name := "`" + dir + "/`"
		switch {
		case !strings.Contains(want, name):
			missing = append(missing, dir)
		case strings.Contains(other, name):
			misplaced = append(misplaced, dir)
		}
		return nil
	}))
	assert.Empty(t, missing, "packages not named where their readers look (README's table, or docs/internals.md for internal ones)")
	assert.Empty(t, misplaced, "packages named in the other table too")
}

// section returns the part of the file name from the line start to the
// next heading of its level or above.
func section(t *testing.T, name, start string) string {
	t.Helper()
	data, err := os.ReadFile(name)
	require.NoError(t, err)
	text := string(data)
	i := strings.Index(text, start)
	require.GreaterOrEqual(t, i, 0, "%s has no %q", name, strings.TrimSpace(start))
	text = text[i:]
	if end := strings.Index(text[1:], "\n## "); end >= 0 && strings.HasPrefix(start, "## ") {
		text = text[:end+1]
	}
	return text
}
