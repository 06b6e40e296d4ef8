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
	root := filepath.Join("..", "..")
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

// The README's layout table names every package of the repository, by its
// folder, so that a newcomer finds each one.
func TestReadmeLayoutNamesEveryPackage(t *testing.T) {
	root := filepath.Join("..", "..")
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	text := string(readme)
	start := strings.Index(text, "## Layout\n")
	require.GreaterOrEqual(t, start, 0, "a Layout section")
	layout := text[start:]
	if end := strings.Index(layout[1:], "\n## "); end >= 0 {
		layout = layout[:end+1]
	}
	var missing []string
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
		if dir != "." && !strings.Contains(layout, "`"+dir+"/`") && !slices.Contains(missing, dir) {
			missing = append(missing, dir)
		}
		return nil
	}))
	assert.Empty(t, missing, "packages the README's layout table does not name")
}
