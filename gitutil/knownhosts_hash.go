package gitutil

import (
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // known_hosts hashing is defined with SHA-1
	"encoding/base64"
)

// hashWithSalt computes the base64 HMAC-SHA1 of host keyed by the base64
// salt, the hashed form of a known_hosts host name.
func hashWithSalt(salt64, host string) string {
	salt, err := base64.StdEncoding.DecodeString(salt64)
	if err != nil {
		return ""
	}
	mac := hmac.New(sha1.New, salt)
	mac.Write([]byte(host))
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}
