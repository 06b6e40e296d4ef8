// Package fluxreceiver is a sink that makes Flux reconcile a GitRepository
// the moment its repository moves, with zero configuration.
//
// In ModeReceiver (the default) it manages, for each GitRepository it is
// handed, a Secret holding a random token and a Receiver of type
// generic-hmac naming that GitRepository; both are owned by the
// GitRepository (a controller owner reference, so that garbage collection
// removes them with it), labelled, written with server-side apply, and put
// back if someone edits or deletes them. On a change it POSTs a small JSON
// body to the notification-controller at the Receiver's webhook path,
// signed with the token in X-Signature, as Flux documents.
//
// In ModeAnnotate it needs no Receiver: it sets the GitRepository's
// reconcile.fluxcd.io/requestedAt annotation, as `flux reconcile source
// git` does; the agent needs RBAC to patch GitRepositories.
//
// Either way it then confirms (unless Config.DisableConfirm) that the
// GitRepository's status.artifact.revision reaches the commit, and
// notifies again if it is still stale after Config.ConfirmTimeout: Flux can
// reconcile before a new commit is visible to it (fluxcd/flux2#479).
//
// The target's Payload names the GitRepository: a payload.GitRepository, as
// source/flux gives it.
//
// RBAC: get, list, watch, create, patch and delete Receivers and Secrets
// (the sink watches those labelled as its own in every namespace), get and
// watch GitRepositories, and patch them in ModeAnnotate.
package fluxreceiver
