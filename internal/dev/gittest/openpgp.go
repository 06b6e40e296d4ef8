package gittest

import (
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
)

// SigningKey makes an OpenPGP key for name and returns it with its public
// key, armored, as a keyring file or a Flux verify Secret holds it.
func SigningKey(t TB, name string) (*openpgp.Entity, string) {
	t.Helper()
	e, err := openpgp.NewEntity(name, "", strings.ToLower(name)+"@example.com", nil)
	if err != nil {
		t.Fatalf("gittest: key %s: %v", name, err)
	}
	var b strings.Builder
	w, err := armor.Encode(&b, openpgp.PublicKeyType, nil)
	if err == nil {
		err = e.Serialize(w)
	}
	if err == nil {
		err = w.Close()
	}
	if err != nil {
		t.Fatalf("gittest: key %s: %v", name, err)
	}
	return e, b.String()
}
