package fluxreceiver_test

import (
	"fmt"

	"github.com/modwatch/modwatch/sink/fluxreceiver"
	"github.com/modwatch/modwatch/source/webhook"
)

func ExampleWebhookPath() {
	// Where notification-controller serves the Receiver "apps" of
	// flux-system (sha256sum of token, name and namespace), and the start of
	// the signature of a body for it (openssl dgst -sha256 -hmac).
	token := "0123456789abcdef"
	fmt.Println(fluxreceiver.WebhookPath(token, "apps", "flux-system"))
	fmt.Println(webhook.Sign(token, []byte(`{"commit":"abc"}`))[:14])
	// Output:
	// /hook/b725bfb73a1704d574ad355a8e5582c68b382ef0107fb6b0ba29efb22c7175d2
	// sha256=9ff8578
}
