// Package signature computes the signature of a generic HMAC webhook, the
// one definition that the sources that verify it (source/webhook) and the
// sinks that send it (sink/fluxreceiver) share, below both.
package signature
