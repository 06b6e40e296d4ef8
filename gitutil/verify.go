package gitutil

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/go-git/go-git/v5/plumbing"
)

// ErrUnverified is returned (wrapped) for a commit that is not signed, or
// not by a trusted key.
var ErrUnverified = errors.New("gitutil: signature not verified")

// ParseKeyRing reads armored OpenPGP public keys; it is an error when there
// is none.
func ParseKeyRing(armored string) (openpgp.EntityList, error) {
	keys, err := openpgp.ReadArmoredKeyRing(strings.NewReader(armored))
	if err != nil {
		return nil, fmt.Errorf("gitutil: key ring: %w", err)
	}
	if len(keys) == 0 {
		return nil, errors.New("gitutil: key ring holds no key")
	}
	return keys, nil
}

// VerifyCommit checks the commit's OpenPGP signature against keyRing
// (armored public keys) and returns the signer's identity. An unsigned
// commit, one signed twice or by a key not in keyRing is ErrUnverified.
func (m *Mirror) VerifyCommit(commit plumbing.Hash, keyRing string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, err := m.commit(commit)
	if err != nil {
		return "", err
	}
	if c.PGPSignature == "" {
		return "", fmt.Errorf("%w: commit %s is not signed", ErrUnverified, commit)
	}
	signer, err := c.Verify(keyRing)
	if err != nil {
		return "", fmt.Errorf("%w: commit %s: %w", ErrUnverified, commit, err)
	}
	if id := signer.PrimaryIdentity(); id != nil {
		return id.Name, nil
	}
	return signer.PrimaryKey.KeyIdString(), nil
}
