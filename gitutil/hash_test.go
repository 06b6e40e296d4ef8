package gitutil

import (
	"errors"
	"strings"
	"testing"
)

// mustHash is ParseHash for a name a test knows to be valid.
func mustHash(s string) Hash {
	h, err := ParseHash(s)
	if err != nil {
		panic(err)
	}
	return h
}

func TestParseHash(t *testing.T) {
	const name = "0123456789abcdef0123456789abcdef01234567"
	h, err := ParseHash(name)
	if err != nil || h.String() != name || h.IsZero() {
		t.Fatalf("ParseHash(%q) = %v, %v", name, h, err)
	}
	if up, err := ParseHash(strings.ToUpper(name)); err != nil || up != h {
		t.Fatalf("upper case: %v, %v", up, err)
	}
	for _, bad := range []string{"", "0123", name + "0", name[:39] + "g", strings.Repeat("é", 20), "HEAD", " " + name[1:]} {
		if _, err := ParseHash(bad); !errors.Is(err, ErrInvalidHash) {
			t.Errorf("ParseHash(%q) = %v, want ErrInvalidHash", bad, err)
		}
	}
	if !ZeroHash.IsZero() || ZeroHash.String() != strings.Repeat("0", 40) {
		t.Fatal("ZeroHash")
	}
}

func FuzzParseHash(f *testing.F) {
	f.Add("0123456789abcdef0123456789abcdef01234567")
	f.Add("zz")
	f.Fuzz(func(t *testing.T, s string) {
		h, err := ParseHash(s)
		if err != nil {
			return
		}
		if !strings.EqualFold(h.String(), s) {
			t.Fatalf("%q parsed to %s", s, h)
		}
	})
}
