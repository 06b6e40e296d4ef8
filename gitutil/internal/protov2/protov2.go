// Package protov2 speaks the parts of git's wire protocol version 2 that a
// ref listing and a partial mirror need: the capability advertisement, the
// ls-refs command, and the fetch command (with a filter, or of objects by
// name), in pkt-lines. The HTTP requests, their credentials and timeouts are the
// caller's (gitutil.ListRefs); what comes back is hostile input, read
// within the caller's limits and refused when malformed.
package protov2

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/pktline"
)

// ErrNoV2 is a server that answered in an older version.
var ErrNoV2 = errors.New("the server does not speak protocol version 2")

// Refs is an ls-refs answer, its object names of type H (a 20-byte
// hash: plumbing.Hash, or the caller's own).
type Refs[H ~[20]byte] struct {
	// Refs maps full ref names to the object they point at; the ref HEAD
	// points at is in it even when no prefix asked for it.
	Refs map[string]H
	// Peeled maps annotated tags to the commit they point at.
	Peeled map[string]H
	// Head is the ref HEAD points at, "" when the server did not say.
	Head string
}

// LsRefsRequest is the body of an ls-refs command for the refs under
// prefixes (every ref when there is none), asking for peeled tags and
// symbolic refs.
func LsRefsRequest(prefixes []string) ([]byte, error) {
	const head = "0014command=ls-refs\n" + "0013agent=modwatch\n" + "0001" + "0009peel\n" + "000csymrefs\n"
	n := len(head) + len("0000")
	for _, p := range prefixes {
		if len("ref-prefix \n")+len(p) > pktline.MaxPayloadSize {
			return nil, fmt.Errorf("ls-refs: a ref prefix of %d bytes is longer than a pkt-line", len(p))
		}
		n += 4 + len("ref-prefix \n") + len(p)
	}
	body := make([]byte, 0, n) // a poll sends one: one allocation
	body = append(body, head...)
	for _, p := range prefixes {
		body = fmt.Appendf(body, "%04xref-prefix %s\n", 4+len("ref-prefix \n")+len(p), p)
	}
	return append(body, "0000"...), nil
}

// ReadCaps reads a version 2 capability advertisement and returns the
// capabilities by name, each with its value ("" when it has none: "fetch"
// of "fetch=shallow filter" is "shallow filter"); ErrNoV2 when the server
// answered in an older version.
func ReadCaps(r io.Reader) (map[string]string, error) {
	s := pktline.NewScanner(r)
	caps := map[string]string{}
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
			name, value, _ := strings.Cut(line, "=")
			caps[name] = value
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
// [ peeled:<oid>]" lines up to a flush-pkt. A line costs the allocation
// of its name (and HEAD's, of its target) and no other: a poll reads one
// every time.
func ParseLsRefs[H ~[20]byte](r io.Reader) (Refs[H], error) {
	out := Refs[H]{Refs: map[string]H{}, Peeled: map[string]H{}}
	s := pktline.NewScanner(r)
	for s.Scan() {
		line := bytes.TrimSuffix(s.Bytes(), []byte("\n"))
		if len(line) == 0 {
			return out, nil // flush-pkt: the end
		}
		oidField, rest, _ := bytes.Cut(line, []byte(" "))
		nameField, attrs, _ := bytes.Cut(rest, []byte(" "))
		var oid H
		if !parseOID(oid[:], oidField) || len(nameField) == 0 {
			return Refs[H]{}, fmt.Errorf("ls-refs: malformed line %.200q", line)
		}
		name := string(nameField)
		for len(attrs) > 0 {
			var attr []byte
			attr, attrs, _ = bytes.Cut(attrs, []byte(" "))
			if t, ok := bytes.CutPrefix(attr, []byte("symref-target:")); ok && name == "HEAD" {
				out.Head = string(t)
			} else if p, ok := bytes.CutPrefix(attr, []byte("peeled:")); ok {
				var peeled H
				if !parseOID(peeled[:], p) {
					return Refs[H]{}, fmt.Errorf("ls-refs: malformed peeled oid in %.200q", line)
				}
				out.Peeled[name] = peeled
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
		return Refs[H]{}, fmt.Errorf("ls-refs: %w", err)
	}
	return Refs[H]{}, errors.New("ls-refs: the answer ended without a flush-pkt")
}

// parseOID decodes a 40-digit hexadecimal object name into dst.
func parseOID(dst, src []byte) bool {
	if len(src) != 2*len(dst) {
		return false
	}
	_, err := hex.Decode(dst, src)
	return err == nil
}

// HasFeature reports whether a capability's value, a list of features
// apart by spaces, names feature ("filter" in "shallow filter").
func HasFeature(value, feature string) bool {
	return slices.Contains(strings.Fields(value), feature)
}

// FetchRequest is the body of a fetch command for wants, the objects the
// mirror has named by haves, and filter (a filter-spec such as
// "blob:none"; "" for none), sent with "done": the server answers with the
// pack at once, without a negotiation. The pack may be thin (with haves)
// and use offset deltas; progress comes on its side band.
func FetchRequest(wants, haves []plumbing.Hash, filter string) []byte {
	var body bytes.Buffer
	enc := pktline.NewEncoder(&body)
	_ = enc.EncodeString("command=fetch\n", "agent=modwatch\n")
	body.WriteString("0001")
	_ = enc.EncodeString("ofs-delta\n")
	if len(haves) > 0 {
		_ = enc.EncodeString("thin-pack\n")
	}
	for _, w := range wants {
		_ = enc.Encodef("want %s\n", w)
	}
	for _, h := range haves {
		_ = enc.Encodef("have %s\n", h)
	}
	if filter != "" {
		_ = enc.Encodef("filter %s\n", filter)
	}
	_ = enc.EncodeString("done\n")
	_ = enc.Flush()
	return body.Bytes()
}

// ErrRemote is an error the server sent in its answer ("ERR ...").
var ErrRemote = errors.New("the server answered with an error")

// ReadToPackfile reads a fetch answer (to a request with "done" and
// without shallow or wanted refs, whose answer has no other section) up
// to its packfile section: what r holds next is the pack, in side-band
// pkt-lines (see go-git's sideband.Demuxer), up to a flush-pkt.
func ReadToPackfile(r io.Reader) error {
	s := pktline.NewScanner(r)
	if !s.Scan() {
		var remote *pktline.ErrorLine
		if err := s.Err(); errors.As(err, &remote) {
			return fmt.Errorf("fetch: %w: %.200s", ErrRemote, remote.Text)
		} else if err != nil {
			return fmt.Errorf("fetch: %w", err)
		}
		return errors.New("fetch: the answer ended before its pack")
	}
	line := strings.TrimSuffix(string(s.Bytes()), "\n")
	switch {
	case line == "packfile":
		return nil
	case strings.HasPrefix(line, "ERR "):
		return fmt.Errorf("fetch: %w: %.200s", ErrRemote, strings.TrimPrefix(line, "ERR "))
	}
	return fmt.Errorf("fetch: unexpected section %.200q", line)
}
