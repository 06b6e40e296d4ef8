package protov2_test

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modwatch/modwatch/gitutil/internal/protov2"
)

// pkt is one pkt-line of s.
func pkt(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }

// Malformed ls-refs answers are errors, never refs.
func TestParseLsRefsRefusesGarbage(t *testing.T) {
	for _, body := range []string{
		"",                       // no flush-pkt
		"0010not-an-oid x\n0000", // bad oid
		"000bshort\n0000",        // too short
		"zzzz",                   // bad length
		"0004",                   // invalid pkt-len
		pkt(strings.Repeat("a", 40)+" refs/heads/x peeled:zz\n") + "0000", // bad peeled
		pkt(strings.Repeat("a", 40)+"\n") + "0000",                        // no name
		pkt(strings.Repeat("a", 40)+" \n") + "0000",                       // an empty name
		pkt(strings.Repeat("a", 41)+" refs/heads/x\n") + "0000",           // a long oid
	} {
		_, err := protov2.ParseLsRefs[plumbing.Hash](strings.NewReader(body))
		assert.Error(t, err, "%q", body)
	}
}

// A good answer: HEAD's target, the ref HEAD points at even when no prefix
// listed it, peeled tags.
func TestParseLsRefs(t *testing.T) {
	a, b := strings.Repeat("a", 40), strings.Repeat("b", 40)
	body := pkt(a+" HEAD symref-target:refs/heads/main\n") +
		pkt(b+" refs/tags/v1 peeled:"+a+"\n") + "0000" + "ignored after the flush"
	refs, err := protov2.ParseLsRefs[plumbing.Hash](strings.NewReader(body))
	require.NoError(t, err)
	assert.Equal(t, protov2.Refs[plumbing.Hash]{
		Head:   "refs/heads/main",
		Refs:   map[string]plumbing.Hash{"refs/heads/main": plumbing.NewHash(a), "refs/tags/v1": plumbing.NewHash(b)},
		Peeled: map[string]plumbing.Hash{"refs/tags/v1": plumbing.NewHash(a)},
	}, refs)
}

func TestReadCaps(t *testing.T) {
	v2 := pkt("# service=git-upload-pack\n") + "0000" + pkt("version 2\n") + pkt("agent=git/2.39\n") + pkt("ls-refs=unborn\n") + pkt("fetch=shallow\n") + "0000"
	caps, err := protov2.ReadCaps(strings.NewReader(v2))
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"agent": "git/2.39", "ls-refs": "unborn", "fetch": "shallow"}, caps)
	assert.False(t, protov2.HasFeature(caps["fetch"], "filter"))
	assert.True(t, protov2.HasFeature("shallow wait-for-done filter", "filter"))
	assert.False(t, protov2.HasFeature("shallow filtered", "filter"), "a feature is a whole word")

	v0 := pkt("# service=git-upload-pack\n") + "0000" + pkt(strings.Repeat("a", 40)+" HEAD\x00multi_ack\n") + "0000"
	_, err = protov2.ReadCaps(strings.NewReader(v0))
	assert.True(t, errors.Is(err, protov2.ErrNoV2), "a version 0 advertisement: %v", err)
	_, err = protov2.ReadCaps(strings.NewReader(""))
	assert.ErrorIs(t, err, protov2.ErrNoV2)
	_, err = protov2.ReadCaps(strings.NewReader("zzzz"))
	assert.Error(t, err)
	assert.NotErrorIs(t, err, protov2.ErrNoV2, "garbage is not an old server")
}

// The request: the command, a delim-pkt, the arguments, a flush-pkt.
func TestLsRefsRequest(t *testing.T) {
	got, err := protov2.LsRefsRequest([]string{"refs/heads/", "HEAD"})
	require.NoError(t, err)
	want := pkt("command=ls-refs\n") + pkt("agent=modwatch\n") + "0001" + pkt("peel\n") + pkt("symrefs\n") +
		pkt("ref-prefix refs/heads/\n") + pkt("ref-prefix HEAD\n") + "0000"
	assert.Equal(t, want, string(got))
	got, err = protov2.LsRefsRequest(nil)
	require.NoError(t, err)
	assert.Equal(t, pkt("command=ls-refs\n")+pkt("agent=modwatch\n")+"0001"+pkt("peel\n")+pkt("symrefs\n")+"0000", string(got))

	// The longest prefix a pkt-line holds, and one byte more.
	longest := strings.Repeat("r", 65516-len("ref-prefix \n"))
	got, err = protov2.LsRefsRequest([]string{longest})
	require.NoError(t, err)
	assert.Contains(t, string(got), "fff0ref-prefix "+longest+"\n0000")
	_, err = protov2.LsRefsRequest([]string{longest + "r"})
	assert.ErrorContains(t, err, "longer than a pkt-line")
}

func FuzzParseLsRefs(f *testing.F) {
	f.Add(pkt(strings.Repeat("a", 40)+" HEAD symref-target:refs/heads/main\n") + "0000")
	f.Add("0004")
	f.Fuzz(func(t *testing.T, body string) {
		refs, err := protov2.ParseLsRefs[plumbing.Hash](strings.NewReader(body))
		if err == nil && (refs.Refs == nil || refs.Peeled == nil) {
			t.Fatalf("accepted %q without maps", body)
		}
	})
}

// A fetch request: arguments after the delim-pkt, haves only with
// thin-pack, the filter, and "done" so that no negotiation follows.
func TestFetchRequest(t *testing.T) {
	a, b := plumbing.NewHash(strings.Repeat("a", 40)), plumbing.NewHash(strings.Repeat("b", 40))
	got := string(protov2.FetchRequest([]plumbing.Hash{a}, []plumbing.Hash{b}, "blob:none"))
	want := pkt("command=fetch\n") + pkt("agent=modwatch\n") + "0001" + pkt("ofs-delta\n") + pkt("thin-pack\n") +
		pkt("want "+a.String()+"\n") + pkt("have "+b.String()+"\n") + pkt("filter blob:none\n") + pkt("done\n") + "0000"
	assert.Equal(t, want, got)
	got = string(protov2.FetchRequest([]plumbing.Hash{a}, nil, ""))
	want = pkt("command=fetch\n") + pkt("agent=modwatch\n") + "0001" + pkt("ofs-delta\n") + pkt("want "+a.String()+"\n") + pkt("done\n") + "0000"
	assert.Equal(t, want, got)
}

// The answer's first section must be the pack; what follows it is left
// unread for the demuxer. Anything else is an error, the server's own
// error named as such.
func TestReadToPackfile(t *testing.T) {
	r := strings.NewReader(pkt("packfile\n") + pkt("\x01PACK"))
	require.NoError(t, protov2.ReadToPackfile(r))
	rest, _ := io.ReadAll(r)
	assert.Equal(t, pkt("\x01PACK"), string(rest), "nothing past the section header is read")

	err := protov2.ReadToPackfile(strings.NewReader(pkt("ERR upload-pack: not our ref abab\n")))
	require.ErrorIs(t, err, protov2.ErrRemote)
	assert.ErrorContains(t, err, "not our ref abab")
	for _, body := range []string{"", "0000", "zzzz", pkt("acknowledgments\n") + "0000", pkt("shallow-info\n"), "0004"} {
		err := protov2.ReadToPackfile(strings.NewReader(body))
		assert.Error(t, err, "%q", body)
		assert.NotErrorIs(t, err, protov2.ErrRemote, "%q", body)
	}
}

func FuzzReadToPackfile(f *testing.F) {
	f.Add(pkt("packfile\n"))
	f.Add(pkt("ERR x\n"))
	f.Add("0001" + pkt("packfile\n"))
	f.Fuzz(func(t *testing.T, body string) {
		err := protov2.ReadToPackfile(strings.NewReader(body))
		if err == nil && !strings.HasPrefix(body, pkt("packfile\n")) && !strings.HasPrefix(body, pkt("packfile")) {
			t.Fatalf("accepted %q", body)
		}
	})
}
