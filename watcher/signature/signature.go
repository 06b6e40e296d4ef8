package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

// HMAC is the signature header value of a generic HMAC webhook: "sha256="
// and the hex HMAC-SHA256 of body keyed by secret. It is the form of
// GitHub's X-Hub-Signature-256, of the X-Signature that Flux's generic-hmac
// Receiver checks, and of what source/webhook accepts.
func HMAC(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}
