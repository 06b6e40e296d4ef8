// Package protov2 speaks the parts of git's wire protocol version 2 that a
// ref listing needs: the capability advertisement and the ls-refs command,
// in pkt-lines. The HTTP requests, their credentials and timeouts are the
// caller's (gitutil.ListRefs); what comes back is hostile input, read
// within the caller's limits and refused when malformed.
package protov2

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/pktline"
)

// ErrNoV2 is a server that answered in an older version.
var ErrNoV2 = errors.New("the server does not speak protocol version 2")

// Refs is an ls-refs answer.
type Refs struct {
	// Refs maps full ref names to the object they point at; the ref HEAD
	// points at is in it even when no prefix asked for it.
	Refs map[string]plumbing.Hash
	// Peeled maps annotated tags to the commit they point at.
	Peeled map[string]plumbing.Hash
	// Head is the ref HEAD points at, "" when the server did not say.
	Head string
}

// LsRefsRequest is the body of an ls-refs command for the refs under
// prefixes (every ref when there is none), asking for peeled tags and
// symbolic refs.
func LsRefsRequest(prefixes []string) []byte {
	var body bytes.Buffer
	enc := pktline.NewEncoder(&body)
	_ = enc.EncodeString("command=ls-refs\n", "agent=modwatch\n")
	body.WriteString("0001") // delim-pkt: the arguments follow
	_ = enc.EncodeString("peel\n", "symrefs\n")
	for _, p := range prefixes {
		_ = enc.Encodef("ref-prefix %s\n", p)
	}
	_ = enc.Flush()
	return body.Bytes()
}

// ReadCaps reads a version 2 capability advertisement and returns the
// capabilities' names; ErrNoV2 when the server answered in an older
// version.
func ReadCaps(r io.Reader) (map[string]bool, error) {
	s := pktline.NewScanner(r)
	caps := map[string]bool{}
	version2 := false
	for s.Scan() {
		line := strings.TrimSuffix(string(s.Bytes()), "\n")
		switch {
		case line == "" || strings.HasPrefix(line, "# service="):
		case line == "version 2":
			version2 = true
		case !version2:
			return nil, ErrNoV2 // a version 0 advertisement: refs
		default:
			name, _, _ := strings.Cut(line, "=")
			caps[name] = true
		}
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("capability advertisement: %w", err)
	}
	if !version2 {
		return nil, ErrNoV2
	}
	return caps, nil
}

// ParseLsRefs reads ls-refs' answer: "<oid> <name>[ symref-target:<t>]
// [ peeled:<oid>]" lines up to a flush-pkt.
func ParseLsRefs(r io.Reader) (Refs, error) {
	out := Refs{Refs: map[string]plumbing.Hash{}, Peeled: map[string]plumbing.Hash{}}
	s := pktline.NewScanner(r)
	for s.Scan() {
		line := strings.TrimSuffix(string(s.Bytes()), "\n")
		if line == "" {
			return out, nil // flush-pkt: the end
		}
		fields := strings.Split(line, " ")
		if len(fields) < 2 || !plumbing.IsHash(fields[0]) {
			return Refs{}, fmt.Errorf("ls-refs: malformed line %.200q", line)
		}
		oid, name := plumbing.NewHash(fields[0]), fields[1]
		for _, attr := range fields[2:] {
			switch {
			case strings.HasPrefix(attr, "symref-target:"):
				if name == "HEAD" {
					out.Head = strings.TrimPrefix(attr, "symref-target:")
				}
			case strings.HasPrefix(attr, "peeled:"):
				p := strings.TrimPrefix(attr, "peeled:")
				if !plumbing.IsHash(p) {
					return Refs{}, fmt.Errorf("ls-refs: malformed peeled oid in %.200q", line)
				}
				out.Peeled[name] = plumbing.NewHash(p)
			}
		}
		if name == "HEAD" {
			if _, ok := out.Refs[out.Head]; out.Head != "" && !ok {
				// The ref HEAD points at, which a "HEAD" prefix alone does
				// not list.
				out.Refs[out.Head] = oid
			}
			continue
		}
		out.Refs[name] = oid
	}
	if err := s.Err(); err != nil {
		return Refs{}, fmt.Errorf("ls-refs: %w", err)
	}
	return Refs{}, errors.New("ls-refs: the answer ended without a flush-pkt")
}
