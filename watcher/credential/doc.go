// Package credential holds how a configuration names the credentials of
// its repositories, in Numaplane's form (its controller configuration's
// repoCredentials, its agent's gitDefinition.repoCredential), so that a
// program holding Numaplane's configuration decodes it into these types
// directly. [Repo] says where each secret value is ([SecretSource]: a
// Kubernetes Secret's key or a file's); reading them is the program's
// (source/gitsync's Credentials does it for a cluster). It imports nothing
// from Kubernetes.
package credential
