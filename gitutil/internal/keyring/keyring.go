package keyring

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"golang.org/x/crypto/ssh"
)

// maxKeyRing caps the keys read.
const maxKeyRing = 1 << 20

// ring is the keys read so far.
type ring struct {
	OpenPGP openpgp.EntityList
	SSH     []ssh.PublicKey
}

// Parse reads trusted public keys: every armored OpenPGP block, not only
// the first (a Secret with one key per entry, joined), and every SSH
// public key line in authorized_keys format ("ssh-ed25519 AAAA... name")
// outside them, as Flux's .sshpub entries hold them. Other text around the
// blocks is skipped, but a line that names an SSH key type and does not
// parse is an error, and so is a ring with no key.
func Parse(keys string) (openpgp.EntityList, []ssh.PublicKey, error) {
	if len(keys) > maxKeyRing {
		return nil, nil, fmt.Errorf("mirror: key ring larger than %d bytes", maxKeyRing)
	}
	kr := &ring{}
	rest := keys
	for {
		i := strings.Index(rest, "-----BEGIN ")
		if i < 0 {
			break
		}
		if err := kr.addSSH(rest[:i]); err != nil {
			return nil, nil, err
		}
		block, err := armor.Decode(strings.NewReader(rest[i:]))
		if err != nil {
			return nil, nil, fmt.Errorf("mirror: key ring: %w", err)
		}
		if block.Type != openpgp.PublicKeyType && block.Type != openpgp.PrivateKeyType {
			return nil, nil, fmt.Errorf("mirror: key ring: a %q block is not a key", block.Type)
		}
		pgp, err := openpgp.ReadKeyRing(block.Body)
		if err != nil {
			return nil, nil, fmt.Errorf("mirror: key ring: %w", err)
		}
		kr.OpenPGP = append(kr.OpenPGP, pgp...)
		end := strings.Index(rest[i:], "-----END ")
		if end < 0 {
			rest = ""
			break
		}
		rest = rest[i+end+len("-----END "):]
		if close := strings.Index(rest, "-----"); close >= 0 {
			rest = rest[close+len("-----"):] // past "-----END PGP PUBLIC KEY BLOCK-----"
		} else {
			rest = ""
		}
	}
	if err := kr.addSSH(rest); err != nil {
		return nil, nil, err
	}
	if len(kr.OpenPGP) == 0 && len(kr.SSH) == 0 {
		return nil, nil, errors.New("mirror: key ring holds no armored OpenPGP key and no SSH public key")
	}
	return kr.OpenPGP, kr.SSH, nil
}

// sshKeyLine reports whether line starts as the SSH public key lines Parse
// reads do: with a key type, or an option authorized_keys lines may begin
// with.
func sshKeyLine(line string) bool {
	for _, p := range []string{"ssh-", "ecdsa-", "sk-", "rsa-", "cert-authority", "namespaces=", "valid-", "from="} {
		if strings.HasPrefix(line, p) {
			return true
		}
	}
	return false
}

// addSSH reads the SSH public key lines of text.
func (r *ring) addSSH(text string) error {
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !sshKeyLine(line) {
			continue // text around an armored block
		}
		pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
		if err != nil {
			return fmt.Errorf("mirror: key ring: SSH public key %q: %w", truncate(line, 32), err)
		}
		r.SSH = append(r.SSH, pub)
	}
	return nil
}

// truncate cuts s to n bytes, marking the cut, for a message.
func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
