package gittest

import (
	"crypto/ed25519"
	"crypto/rand"
	"strings"

	"golang.org/x/crypto/ssh"
)

// SSHSigningKey makes an SSH key for name and returns its signer with its
// public key as an authorized_keys line, as Flux's .sshpub entries hold it.
func SSHSigningKey(t TB, name string) (ssh.Signer, string) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatalf("gittest: SSH key %s: %v", name, err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatalf("gittest: SSH key %s: %v", name, err)
	}
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(s.PublicKey()))) + " " + name + "\n"
	return s, line
}
