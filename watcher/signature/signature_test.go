package signature_test

import (
	"fmt"

	"github.com/modwatch/modwatch/watcher/signature"
)

// The signature of RFC 4231's second test case, as a webhook header.
func ExampleHMAC() {
	fmt.Println(signature.HMAC("Jefe", []byte("what do ya want for nothing?")))
	// Output:
	// sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843
}
