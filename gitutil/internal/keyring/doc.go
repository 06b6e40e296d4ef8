// Package keyring reads the public keys a mirror trusts to verify
// signatures: armored OpenPGP blocks, and SSH public key lines in
// authorized_keys format, from one text.
package keyring
