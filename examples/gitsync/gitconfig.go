package main

import (
	"errors"
	"fmt"
	"strings"
)

// parseGitConfigs parses git-sync's --git-config list: key:value pairs
// separated by commas, where a key or a value may be double-quoted (then
// it may hold ':' and ','), and \\, \", \, \n and \t are escapes in a
// value. It returns them as git's -c takes them, key=value.
func parseGitConfigs(s string) ([]string, error) {
	var out []string
	for rest := s; rest != ""; {
		key, r, err := configToken(rest, ':', "key")
		if err != nil {
			return nil, err
		}
		if key == "" {
			return nil, fmt.Errorf("%q: empty key", s)
		}
		if r == "" {
			return nil, fmt.Errorf("key %q: no value", key)
		}
		val, r, err := configToken(r, ',', "value")
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", key, err)
		}
		if strings.ContainsAny(key, "=\n") {
			return nil, fmt.Errorf("key %q: not a git configuration name", key)
		}
		out = append(out, key+"="+val)
		rest = r
	}
	return out, nil
}

// configToken reads one key or value from s: quoted, or up to sep (the
// separator is consumed). It returns the token and what follows.
func configToken(s string, sep byte, what string) (tok, rest string, err error) {
	quoted := strings.HasPrefix(s, `"`)
	if quoted {
		s = s[1:]
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			if i+1 == len(s) {
				return "", "", errors.New("unterminated escape")
			}
			i++
			e, ok := map[byte]byte{'\\': '\\', '"': '"', ',': ',', 'n': '\n', 't': '\t'}[s[i]]
			if !ok {
				return "", "", fmt.Errorf("unknown escape \\%c", s[i])
			}
			b.WriteByte(e)
		case quoted && c == '"':
			rest = s[i+1:]
			if rest != "" && rest[0] != sep {
				return "", "", fmt.Errorf("unexpected %q after quoted %s %q", rest[0], what, b.String())
			}
			if rest != "" {
				rest = rest[1:]
			}
			if sep == ':' && rest == "" && !strings.HasPrefix(s[i+1:], ":") {
				return "", "", fmt.Errorf("unexpected end of %s %q", what, b.String())
			}
			return b.String(), rest, nil
		case !quoted && c == sep:
			return b.String(), s[i+1:], nil
		default:
			b.WriteByte(c)
		}
	}
	if quoted {
		return "", "", fmt.Errorf("unterminated quoted %s %q", what, b.String())
	}
	if sep == ':' {
		return "", "", fmt.Errorf("unexpected end of key %q", b.String())
	}
	return b.String(), "", nil
}
