package release

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"golang.org/x/mod/semver"
)

// The Changelog is CHANGELOG.md in the form of Keep a Changelog: a
// "## [Unreleased]" section first, then one "## [X.Y.Z] - date" section a
// release, newest first. A release's section says which commit it was made
// from ("Released from commit <40 hex digits>"): a clone without tags still
// knows its last release.
type Changelog struct {
	lines []string
	// unreleased is the index of the Unreleased heading; releases are the
	// indexes of the release headings, in the file's order.
	unreleased int
	releases   []int
}

var (
	headingRE  = regexp.MustCompile(`^## \[?([^\]\s]+)\]?(?:\s+-\s+(\d{4}-\d{2}-\d{2}))?\s*$`)
	releasedRE = regexp.MustCompile(`^Released from commit ([0-9a-f]{40})\b`)
)

// ParseChangelog reads data. It must have one Unreleased section before any
// release, and release headings that are semantic versions, newest first.
func ParseChangelog(data []byte) (*Changelog, error) {
	c := &Changelog{lines: strings.Split(string(data), "\n"), unreleased: -1}
	var last string
	for i, l := range c.lines {
		if !strings.HasPrefix(l, "## ") {
			continue
		}
		m := headingRE.FindStringSubmatch(l)
		if m == nil {
			return nil, fmt.Errorf("CHANGELOG.md:%d: a section heading is \"## [Unreleased]\" or \"## [X.Y.Z] - YYYY-MM-DD\", not %q", i+1, l)
		}
		if strings.EqualFold(m[1], "Unreleased") {
			if c.unreleased >= 0 || len(c.releases) > 0 {
				return nil, fmt.Errorf("CHANGELOG.md:%d: the Unreleased section comes once, before every release", i+1)
			}
			c.unreleased = i
			continue
		}
		v := "v" + m[1]
		if !semver.IsValid(v) || semver.Canonical(v) != v || m[2] == "" {
			return nil, fmt.Errorf("CHANGELOG.md:%d: %q is not a release heading (## [X.Y.Z] - YYYY-MM-DD)", i+1, l)
		}
		if last != "" && semver.Compare(v, last) >= 0 {
			return nil, fmt.Errorf("CHANGELOG.md:%d: %s is listed below %s: releases go newest first", i+1, v, last)
		}
		last = v
		c.releases = append(c.releases, i)
	}
	if c.unreleased < 0 {
		return nil, errors.New("CHANGELOG.md has no \"## [Unreleased]\" section")
	}
	return c, nil
}

// section is the text under heading i, to the next "## " heading.
func (c *Changelog) section(i int) string {
	end := len(c.lines)
	for j := i + 1; j < len(c.lines); j++ {
		if strings.HasPrefix(c.lines[j], "## ") {
			end = j
			break
		}
	}
	return strings.Join(c.lines[i+1:end], "\n")
}

// Unreleased is the text of the Unreleased section.
func (c *Changelog) Unreleased() string { return c.section(c.unreleased) }

// LastRelease is the newest release's version (vX.Y.Z) and the commit it
// was made from; ok is false before the first release.
func (c *Changelog) LastRelease() (version, commit string, ok bool, err error) {
	if len(c.releases) == 0 {
		return "", "", false, nil
	}
	i := c.releases[0]
	version = "v" + headingRE.FindStringSubmatch(c.lines[i])[1]
	for _, l := range strings.Split(c.section(i), "\n") {
		if m := releasedRE.FindStringSubmatch(l); m != nil {
			return version, m[1], true, nil
		}
	}
	return version, "", false, fmt.Errorf("CHANGELOG.md:%d: release %s does not say which commit it was made from (\"Released from commit <sha>\")", i+1, version)
}

// Cut moves the Unreleased section's text under a new heading for version,
// dated date, and leaves Unreleased empty.
func (c *Changelog) Cut(version, date string) ([]byte, error) {
	if !semver.IsValid(version) || semver.Canonical(version) != version || semver.Build(version) != "" {
		return nil, fmt.Errorf("%q is not a release version (vX.Y.Z or vX.Y.Z-pre)", version)
	}
	if last, _, ok, _ := c.LastRelease(); ok && semver.Compare(version, last) <= 0 {
		return nil, fmt.Errorf("%s is not newer than the last release, %s", version, last)
	}
	if strings.TrimSpace(c.Unreleased()) == "" {
		return nil, errors.New("CHANGELOG.md: the Unreleased section is empty: say what this release brings")
	}
	out := append([]string{}, c.lines[:c.unreleased]...)
	out = append(out, "## [Unreleased]", "", fmt.Sprintf("## [%s] - %s", strings.TrimPrefix(version, "v"), date))
	out = append(out, c.lines[c.unreleased+1:]...)
	return []byte(strings.Join(out, "\n")), nil
}

// Record writes under version's heading which commit it was made from and
// its tags.
func (c *Changelog) Record(version, commit string, tags []string) ([]byte, error) {
	if len(c.releases) == 0 || "v"+headingRE.FindStringSubmatch(c.lines[c.releases[0]])[1] != version {
		return nil, fmt.Errorf("CHANGELOG.md: %s is not the newest release", version)
	}
	if !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(commit) {
		return nil, fmt.Errorf("%q is not a commit", commit)
	}
	i := c.releases[0]
	note := fmt.Sprintf("Released from commit %s (tags %s).", commit, strings.Join(tags, ", "))
	out := append([]string{}, c.lines[:i+1]...)
	out = append(out, "", note)
	out = append(out, c.lines[i+1:]...)
	return []byte(strings.Join(out, "\n")), nil
}

// UnreleasedNotes is the Unreleased section of root's CHANGELOG.md.
func UnreleasedNotes(root string) (string, error) {
	cl, err := readChangelog(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		return "", err
	}
	return cl.Unreleased(), nil
}
