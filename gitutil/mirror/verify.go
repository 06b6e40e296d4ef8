package mirror

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/internal/keyring"
)

// ErrUnverified is returned (wrapped) for a commit that is not signed, or
// not by a trusted key.
var ErrUnverified = errors.New("mirror: signature not verified")

// sshNamespace is the namespace git signs commits and tags in (ssh-keygen
// -Y sign -n git).
const sshNamespace = "git"

// KeyRing is a set of trusted public keys: OpenPGP keys and SSH keys, as
// git signs with either (gpg.format openpgp or ssh).
type KeyRing struct {
	OpenPGP openpgp.EntityList
	SSH     []ssh.PublicKey
}

// ParseKeyRing reads trusted public keys: every armored OpenPGP block, not
// only the first (a Secret with one key per entry, joined), and every SSH
// public key line in authorized_keys format ("ssh-ed25519 AAAA... name")
// outside them, as Flux's .sshpub entries hold them. Other text around the
// blocks is skipped, but a line that names an SSH key type and does not
// parse is an error, and so is a ring with no key.
func ParseKeyRing(keys string) (*KeyRing, error) {
	pgp, sshKeys, err := keyring.Parse(keys)
	if err != nil {
		return nil, err
	}
	return &KeyRing{OpenPGP: pgp, SSH: sshKeys}, nil
}

// VerifyCommit checks the commit's signature, OpenPGP or SSH, against
// keyRing (see [ParseKeyRing]) and returns the signer's identity (an
// OpenPGP key's name or ID, an SSH key's SHA256 fingerprint). An unsigned
// commit, one signed twice or by a key not in keyRing is ErrUnverified.
func (m *Mirror) VerifyCommit(h gitutil.Hash, keyRing string) (string, error) {
	commit := plumbing.Hash(h)
	keys, err := ParseKeyRing(keyRing)
	if err != nil {
		return "", err
	}
	m.mu.Lock()
	defer m.unlock()
	c, err := m.commit(commit)
	if err != nil {
		return "", err
	}
	return m.checkSignature(keys, "commit", commit, c.PGPSignature, c.EncodeWithoutSignature)
}

// VerifyTag is VerifyCommit for the annotated tag the mirror's ref names
// (refs/tags/X), which must lead to commit: the tag verified is the one
// the commit was fetched through. A lightweight tag (no tag object) is
// ErrUnverified.
func (m *Mirror) VerifyTag(ref string, c gitutil.Hash, keyRing string) (string, error) {
	commit := plumbing.Hash(c)
	keys, err := ParseKeyRing(keyRing)
	if err != nil {
		return "", err
	}
	m.mu.Lock()
	defer m.unlock()
	r, err := m.repo.Reference(plumbing.ReferenceName(ref), true)
	if err != nil {
		return "", fmt.Errorf("mirror: ref %s: %w", ref, err)
	}
	t, err := m.repo.TagObject(r.Hash())
	if errors.Is(err, plumbing.ErrObjectNotFound) {
		return "", fmt.Errorf("%w: %s is not an annotated tag", ErrUnverified, ref)
	}
	if err != nil {
		return "", m.markCorrupt(err)
	}
	if peeled, err := m.refCommit(ref); err != nil || peeled != commit {
		return "", fmt.Errorf("%w: %s does not lead to %s", ErrUnverified, ref, commit)
	}
	return m.checkSignature(keys, "tag "+t.Name, t.Hash, t.PGPSignature, t.EncodeWithoutSignature)
}

// checkSignature checks one detached armored signature over the object
// encoded without it.
func (m *Mirror) checkSignature(keys *KeyRing, what string, h plumbing.Hash, signature string, encode func(plumbing.EncodedObject) error) (string, error) {
	pgp := strings.Count(signature, "-----BEGIN PGP SIGNATURE-----")
	sshSigs := strings.Count(signature, "-----BEGIN SSH SIGNATURE-----")
	switch {
	case pgp+sshSigs == 0:
		return "", fmt.Errorf("%w: %s %s is not signed (with OpenPGP or SSH)", ErrUnverified, what, h)
	case pgp+sshSigs > 1:
		return "", fmt.Errorf("%w: %s %s carries several signatures", ErrUnverified, what, h)
	}
	unsigned := &plumbing.MemoryObject{}
	if err := encode(unsigned); err != nil {
		return "", m.markCorrupt(err)
	}
	r, err := unsigned.Reader()
	if err != nil {
		return "", err
	}
	defer r.Close()
	if sshSigs == 1 {
		payload, err := io.ReadAll(r)
		if err != nil {
			return "", err
		}
		return verifySSH(keys.SSH, what, h, signature, payload)
	}
	signer, err := openpgp.CheckArmoredDetachedSignature(keys.OpenPGP, io.Reader(r), strings.NewReader(signature), nil)
	if err != nil {
		return "", fmt.Errorf("%w: %s %s: %w", ErrUnverified, what, h, err)
	}
	if id := signer.PrimaryIdentity(); id != nil {
		return id.Name, nil
	}
	return signer.PrimaryKey.KeyIdString(), nil
}

// verifySSH checks an armored SSH signature (git's namespace) of payload
// against the trusted SSH keys.
func verifySSH(keys []ssh.PublicKey, what string, h plumbing.Hash, signature string, payload []byte) (string, error) {
	if len(keys) == 0 {
		return "", fmt.Errorf("%w: %s %s is signed with SSH, and no SSH key is trusted", ErrUnverified, what, h)
	}
	sig, err := sshsig.Unarmor([]byte(strings.TrimSpace(signature)))
	if err != nil {
		return "", fmt.Errorf("%w: %s %s: SSH signature: %w", ErrUnverified, what, h, err)
	}
	for _, k := range keys {
		if sshsig.Verify(bytes.NewReader(payload), sig, k, sig.HashAlgorithm, sshNamespace) == nil {
			return ssh.FingerprintSHA256(k), nil
		}
	}
	return "", fmt.Errorf("%w: %s %s: SSH signature by %s, not a trusted key", ErrUnverified, what, h, ssh.FingerprintSHA256(sig.PublicKey))
}
