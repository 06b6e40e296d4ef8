// Package fluxtest plays Flux's notification-controller for tests, against
// the real apiserver of the test control plane: a webhook receiver that
// implements the Receiver contract as Flux documents it, with the Receiver
// type and its GetWebhookPath taken from Flux's own API module, and the
// status role (status.webhookPath and Ready) the controller plays.
package fluxtest
