package gitutil

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/go-git/go-git/v5/plumbing"
)

// ErrUnverified is returned (wrapped) for a commit that is not signed, or
// not by a trusted key.
var ErrUnverified = errors.New("gitutil: signature not verified")

// maxKeyRing caps the armored keys read.
const maxKeyRing = 1 << 20

// ParseKeyRing reads armored OpenPGP public keys: every armored block in
// armored, not only the first (a Secret with one key per entry, joined). It
// is an error when there is none.
func ParseKeyRing(armored string) (openpgp.EntityList, error) {
	if len(armored) > maxKeyRing {
		return nil, fmt.Errorf("gitutil: key ring larger than %d bytes", maxKeyRing)
	}
	var keys openpgp.EntityList
	rest := armored
	for {
		i := strings.Index(rest, "-----BEGIN ")
		if i < 0 {
			break
		}
		block, err := armor.Decode(strings.NewReader(rest[i:]))
		if err != nil {
			return nil, fmt.Errorf("gitutil: key ring: %w", err)
		}
		if block.Type != openpgp.PublicKeyType && block.Type != openpgp.PrivateKeyType {
			return nil, fmt.Errorf("gitutil: key ring: a %q block is not a key", block.Type)
		}
		ring, err := openpgp.ReadKeyRing(block.Body)
		if err != nil {
			return nil, fmt.Errorf("gitutil: key ring: %w", err)
		}
		keys = append(keys, ring...)
		end := strings.Index(rest[i:], "-----END ")
		if end < 0 {
			break
		}
		rest = rest[i+end+len("-----END "):]
	}
	if len(keys) == 0 {
		return nil, errors.New("gitutil: key ring holds no armored key")
	}
	return keys, nil
}

// VerifyCommit checks the commit's OpenPGP signature against keyRing
// (armored public keys, see [ParseKeyRing]) and returns the signer's
// identity. An unsigned commit, one signed twice or by a key not in
// keyRing is ErrUnverified.
func (m *Mirror) VerifyCommit(commit plumbing.Hash, keyRing string) (string, error) {
	keys, err := ParseKeyRing(keyRing)
	if err != nil {
		return "", err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
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
func (m *Mirror) VerifyTag(ref string, commit plumbing.Hash, keyRing string) (string, error) {
	keys, err := ParseKeyRing(keyRing)
	if err != nil {
		return "", err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.repo.Reference(plumbing.ReferenceName(ref), true)
	if err != nil {
		return "", fmt.Errorf("gitutil: ref %s: %w", ref, err)
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

// checkSignature checks one detached armored signature over the object encoded
// without it.
func (m *Mirror) checkSignature(keys openpgp.EntityList, what string, h plumbing.Hash, signature string, encode func(plumbing.EncodedObject) error) (string, error) {
	switch strings.Count(signature, "-----BEGIN PGP SIGNATURE-----") {
	case 0:
		return "", fmt.Errorf("%w: %s %s is not signed (with OpenPGP)", ErrUnverified, what, h)
	case 1:
	default:
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
	signer, err := openpgp.CheckArmoredDetachedSignature(keys, io.Reader(r), strings.NewReader(signature), nil)
	if err != nil {
		return "", fmt.Errorf("%w: %s %s: %w", ErrUnverified, what, h, err)
	}
	if id := signer.PrimaryIdentity(); id != nil {
		return id.Name, nil
	}
	return signer.PrimaryKey.KeyIdString(), nil
}
