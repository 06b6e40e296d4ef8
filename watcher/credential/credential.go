package credential

import (
	"errors"
	"fmt"
)

// Repo is how to reach the repositories under URL, in Numaplane's form
// (its controller configuration's repoCredentials, its agent's
// gitDefinition.repoCredential): the same JSON, so that a program holding
// Numaplane's configuration decodes it into this type directly. URL is a
// prefix of normalised repository URLs (https, ssh and scp-like forms all
// match).
type Repo struct {
	URL            string `json:"url"`
	HTTPCredential *HTTP  `json:"httpCredential,omitempty"`
	SSHCredential  *SSH   `json:"sshCredential,omitempty"`
	TLS            *TLS   `json:"tls,omitempty"`
}

// HTTP is a user and password (or token) for HTTPS.
type HTTP struct {
	Username string        `json:"username,omitempty"`
	Password *SecretSource `json:"password,omitempty"`
	// AllowInsecureHTTP (added to Numaplane's) lets them travel over plain
	// http:// too, where anyone on the path reads them: for a dev or test
	// cluster's own git server. Off, a repository URL with http:// under
	// this credential is refused, and the refusal names this key.
	AllowInsecureHTTP bool `json:"allowInsecureHTTP,omitempty"`
}

// SSH is an SSH key, and (added to Numaplane's) the known_hosts that SSH
// checks the server against, or the explicit opt-out of that check.
type SSH struct {
	SSHKey     *SecretSource `json:"SSHKey,omitempty"`
	KnownHosts *SecretSource `json:"knownHosts,omitempty"`
	// InsecureIgnoreHostKey accepts any host key: SSH then cannot tell the
	// repository's host from another that answers in its place.
	InsecureIgnoreHostKey bool `json:"insecureIgnoreHostKey,omitempty"`
}

// TLS is HTTPS verification; CACertificate (added to Numaplane's) is a PEM
// bundle trusted for the repositories.
type TLS struct {
	InsecureSkipVerify bool          `json:"insecureSkipVerify,omitempty"`
	CACertificate      *SecretSource `json:"caCertificate,omitempty"`
}

// SecretSource says where a secret value is.
type SecretSource struct {
	FromKubernetesSecret *SecretKeyRef `json:"fromKubernetesSecret,omitempty"`
	FromFile             *FileKeyRef   `json:"fromFile,omitempty"`
}

// SecretKeyRef is a key of a Secret.
type SecretKeyRef struct {
	Name      string `json:"name"`
	Key       string `json:"key"`
	Namespace string `json:"namespace"`
}

// FileKeyRef is a key of a JSON or YAML file holding a map.
type FileKeyRef struct {
	JSONFilePath string `json:"jsonFilePath,omitempty"`
	YAMLFilePath string `json:"yamlFilePath,omitempty"`
	Key          string `json:"key"`
}

// Sources returns the secret sources of rc by their field path
// ("httpCredential.password").
func (rc Repo) Sources() map[string]*SecretSource {
	m := map[string]*SecretSource{}
	if h := rc.HTTPCredential; h != nil && h.Password != nil {
		m["httpCredential.password"] = h.Password
	}
	if s := rc.SSHCredential; s != nil {
		if s.SSHKey != nil {
			m["sshCredential.SSHKey"] = s.SSHKey
		}
		if s.KnownHosts != nil {
			m["sshCredential.knownHosts"] = s.KnownHosts
		}
	}
	if t := rc.TLS; t != nil && t.CACertificate != nil {
		m["tls.caCertificate"] = t.CACertificate
	}
	return m
}

// Validate checks rc without reading a secret; the error names the field
// (below the prefix at, such as "repoCredentials[1]").
func (rc Repo) Validate(at string) error {
	if rc.HTTPCredential == nil && rc.SSHCredential == nil && rc.TLS == nil {
		return fmt.Errorf("%s: no httpCredential, sshCredential or tls", at)
	}
	for name, src := range rc.Sources() {
		if err := src.Validate(); err != nil {
			return fmt.Errorf("%s.%s: %w", at, name, err)
		}
	}
	if s := rc.SSHCredential; s != nil {
		switch {
		case s.SSHKey == nil:
			return fmt.Errorf("%s.sshCredential: no SSHKey", at)
		case s.KnownHosts == nil && !s.InsecureIgnoreHostKey:
			return fmt.Errorf("%s.sshCredential: no knownHosts: SSH would refuse every host; give sshCredential.knownHosts "+
				"(a known_hosts file's lines), or sshCredential.insecureIgnoreHostKey: true to accept any host key", at)
		case s.KnownHosts != nil && s.InsecureIgnoreHostKey:
			return fmt.Errorf("%s.sshCredential: both knownHosts and insecureIgnoreHostKey", at)
		}
	}
	return nil
}

// Validate checks that exactly one source is set, whole.
func (s *SecretSource) Validate() error {
	switch {
	case s.FromKubernetesSecret != nil && s.FromFile != nil:
		return errors.New("both fromKubernetesSecret and fromFile are set")
	case s.FromKubernetesSecret != nil:
		r := s.FromKubernetesSecret
		if r.Name == "" || r.Key == "" || r.Namespace == "" {
			return errors.New("fromKubernetesSecret needs name, key and namespace")
		}
	case s.FromFile != nil:
		f := s.FromFile
		if (f.JSONFilePath == "") == (f.YAMLFilePath == "") || f.Key == "" {
			return errors.New("fromFile needs one of jsonFilePath and yamlFilePath, and key")
		}
	default:
		return errors.New("neither fromKubernetesSecret nor fromFile is set")
	}
	return nil
}
