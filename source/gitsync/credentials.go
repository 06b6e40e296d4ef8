package gitsync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/safefile"
)

// Credentials resolves repository credentials from a controller
// configuration, reading Secrets and files at each resolution, so that a
// rotated Secret is used as soon as the watcher resolves again (see
// [Source.Refresh]). It is a [gitutil.CredentialResolver].
type Credentials struct {
	kube kubernetes.Interface
	cur  atomic.Pointer[credSet]
}

type credSet struct {
	creds    []RepoCredential
	prefixes *gitutil.URLPrefixes
	replaced chan struct{} // closed when Set replaces this set
}

var _ gitutil.CredentialResolver = (*Credentials)(nil)

// NewCredentials returns a resolver of cfg's repoCredentials (nil: none
// yet), reading Secrets through kube (which may be nil when no Secret is
// named).
func NewCredentials(kube kubernetes.Interface, cfg *ControllerConfig) (*Credentials, error) {
	c := &Credentials{kube: kube}
	if cfg == nil {
		cfg = &ControllerConfig{}
	}
	return c, c.Set(cfg)
}

// SetRepoCredentials replaces the credentials with rcs, as [Credentials.Set]
// with a configuration of them alone: what a configmap source hands its
// program (configmap.LoadOptions.Credentials).
func (c *Credentials) SetRepoCredentials(rcs []RepoCredential) error {
	return c.Set(&ControllerConfig{RepoCredentials: rcs})
}

// Set replaces the credentials (a reloaded configuration).
func (c *Credentials) Set(cfg *ControllerConfig) error {
	var prefixes []string
	for _, rc := range cfg.RepoCredentials {
		prefixes = append(prefixes, rc.URL)
	}
	p, err := gitutil.NewURLPrefixes(prefixes)
	if err != nil {
		return fmt.Errorf("%w: repoCredentials: %w", ErrInvalidConfig, err)
	}
	if old := c.cur.Swap(&credSet{creds: slices.Clone(cfg.RepoCredentials), prefixes: p, replaced: make(chan struct{})}); old != nil {
		close(old.replaced)
	}
	return nil
}

// Resolve returns the credentials of the longest prefix matching repoURL,
// nil when none matches. The error names the Secret or file and the key,
// never a value.
func (c *Credentials) Resolve(ctx context.Context, repoURL string) (*gitutil.Auth, error) {
	set := c.cur.Load()
	i, err := set.prefixes.Match(repoURL)
	if err != nil || i < 0 {
		return nil, err
	}
	rc := set.creds[i]
	// The entry is the credential: a rotated Secret keeps the mirror.
	auth := &gitutil.Auth{ID: "gitsync-repoCredentials:" + rc.URL}
	read := func(name string, s *SecretSource) ([]byte, error) {
		v, err := c.read(ctx, s)
		if err != nil {
			return nil, fmt.Errorf("gitsync: credentials %q %s: %w", rc.URL, name, err)
		}
		return v, nil
	}
	if h := rc.HTTPCredential; h != nil {
		if e, _ := gitutil.ParseURL(repoURL); e.Scheme == "http" && !h.AllowInsecureHTTP {
			return nil, fmt.Errorf("%w: repoCredentials %q for %s: set httpCredential.allowInsecureHTTP: true in it to send them there",
				gitutil.ErrInsecureCredentials, rc.URL, gitutil.RedactURL(repoURL))
		}
		auth.Username, auth.AllowInsecureHTTP = h.Username, h.AllowInsecureHTTP
		if h.Password != nil {
			v, err := read("httpCredential.password", h.Password)
			if err != nil {
				return nil, err
			}
			auth.Password = string(v)
		}
	}
	if s := rc.SSHCredential; s != nil {
		if s.SSHKey != nil {
			if auth.SSHPrivateKey, err = read("sshCredential.SSHKey", s.SSHKey); err != nil {
				return nil, err
			}
		}
		if s.KnownHosts != nil {
			if auth.KnownHosts, err = read("sshCredential.knownHosts", s.KnownHosts); err != nil {
				return nil, err
			}
		}
		auth.InsecureIgnoreHostKey = s.InsecureIgnoreHostKey
	}
	if t := rc.TLS; t != nil {
		auth.InsecureSkipTLSVerify = t.InsecureSkipVerify
		if t.CACertificate != nil {
			if auth.CABundle, err = read("tls.caCertificate", t.CACertificate); err != nil {
				return nil, err
			}
		}
	}
	return auth, nil
}

// maxCredentialFile bounds a credential file read: a Secret holds at most
// 1 MiB; a file a user writes, with a CA bundle, gets room to spare.
const maxCredentialFile = 4 << 20

func (c *Credentials) read(ctx context.Context, s *SecretSource) ([]byte, error) {
	if r := s.FromKubernetesSecret; r != nil {
		if c.kube == nil {
			return nil, errors.New("no Kubernetes client to read Secrets with")
		}
		sec, err := c.kube.CoreV1().Secrets(r.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("secret %s/%s not found", r.Namespace, r.Name)
		}
		if err != nil {
			return nil, fmt.Errorf("secret %s/%s: %w", r.Namespace, r.Name, err)
		}
		v, ok := sec.Data[r.Key]
		if !ok {
			return nil, fmt.Errorf("secret %s/%s has no key %q", r.Namespace, r.Name, r.Key)
		}
		return v, nil
	}
	f := s.FromFile
	path := f.JSONFilePath + f.YAMLFilePath
	// A mounted Secret's key is a link through ..data: followed, to a
	// regular file only (a named pipe is refused, not waited on).
	data, err := safefile.ReadFile(ctx, path, maxCredentialFile, safefile.Follow)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := yaml.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%s: not a JSON or YAML map", path)
	}
	v, ok := m[f.Key].(string)
	if !ok {
		return nil, fmt.Errorf("%s has no string key %q", path, f.Key)
	}
	return []byte(v), nil
}
