package gitcli

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/modwatch/modwatch/gitutil"
)

// Env is the environment of a git CLI command that reaches e with t: no
// prompt, and every credential through the environment or a file (mode
// 0600) in a private temporary directory under tempDir (the system's when
// ""), which done removes, never argv. Configuration (with cfg's) goes in
// as GIT_CONFIG_* pairs.
func Env(tempDir string, e gitutil.Endpoint, t gitutil.Transport, cfg ...[2]string) (env []string, done func(), err error) {
	if t.Auth == nil {
		t.Auth = &gitutil.Auth{}
	}
	if t.Auth.SSHPassphrase != "" {
		return nil, nil, fmt.Errorf("git CLI cannot use a passphrase-protected key non-interactively")
	}
	tmp, err := os.MkdirTemp(tempDir, "modwatch-git-")
	if err != nil {
		return nil, nil, err
	}
	done = func() { _ = os.RemoveAll(tmp) }
	if env, err = environ(tmp, e, t, cfg...); err != nil {
		done()
		return nil, nil, err
	}
	return env, done, nil
}

// CloneBranch is the branch or tag a clone of refs starts from: the first
// of them that is one.
func CloneBranch(refs []string) (string, error) {
	for _, r := range refs {
		if name, ok := strings.CutPrefix(r, "refs/heads/"); ok {
			return name, nil
		}
		if name, ok := strings.CutPrefix(r, "refs/tags/"); ok {
			return name, nil
		}
	}
	return "", fmt.Errorf("no branch or tag to clone")
}

// environ is Env's environment, its files in tmp.
func environ(tmp string, e gitutil.Endpoint, t gitutil.Transport, cfg ...[2]string) ([]string, error) {
	a := t.Auth
	env := append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=", "SSH_ASKPASS=")
	switch e.Scheme {
	case "http", "https":
		hcfg, henv, err := httpEnv(tmp, t)
		if err != nil {
			return nil, err
		}
		cfg, env = append(cfg, hcfg...), append(env, henv...)
	case "ssh":
		ids := ""
		for i, k := range a.SSHKeys() {
			key := filepath.Join(tmp, fmt.Sprintf("key-%d", i))
			if err := os.WriteFile(key, k, 0o600); err != nil {
				return nil, err
			}
			ids += " -i " + key
		}
		kh := filepath.Join(tmp, "known_hosts")
		if err := os.WriteFile(kh, a.KnownHosts, 0o600); err != nil {
			return nil, err
		}
		strict := "yes"
		if a.InsecureIgnoreHostKey {
			strict, kh = "no", os.DevNull
		}
		env = append(env, fmt.Sprintf("GIT_SSH_COMMAND=ssh -F /dev/null%s -o IdentitiesOnly=yes -o UserKnownHostsFile=%s -o StrictHostKeyChecking=%s -o BatchMode=yes", ids, kh, strict))
	}
	env = append(env, fmt.Sprintf("GIT_CONFIG_COUNT=%d", len(cfg)))
	for i, kv := range cfg {
		env = append(env, fmt.Sprintf("GIT_CONFIG_KEY_%d=%s", i, kv[0]), fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", i, kv[1]))
	}
	return env, nil
}

// httpEnv is the configuration and environment of an HTTP(S) clone with t.
func httpEnv(tmp string, t gitutil.Transport) (cfg [][2]string, env []string, err error) {
	a := t.Auth
	switch {
	case a.BearerToken != "":
		cfg = append(cfg, [2]string{"http.extraHeader", "Authorization: Bearer " + a.BearerToken})
	case a.Username != "" || a.Password != "":
		user := a.Username
		if user == "" {
			user = "git"
		}
		cred := base64.StdEncoding.EncodeToString([]byte(user + ":" + a.Password))
		cfg = append(cfg, [2]string{"http.extraHeader", "Authorization: Basic " + cred})
	}
	if len(a.CABundle) > 0 {
		p := filepath.Join(tmp, "ca.pem")
		if err := os.WriteFile(p, a.CABundle, 0o600); err != nil {
			return nil, nil, err
		}
		env = append(env, "GIT_SSL_CAINFO="+p)
	}
	if a.InsecureSkipTLSVerify {
		env = append(env, "GIT_SSL_NO_VERIFY=1")
	}
	if a.Proxy != nil {
		po := t.Proxy // checked by Auth.Transport
		u, err := po.FullURL()
		if err != nil {
			return nil, nil, err
		}
		// Through the environment, as the other credentials: never argv.
		// The proxy carries everything, as go-git's does: NO_PROXY is
		// not consulted.
		cfg = append(cfg, [2]string{"http.proxy", u.String()})
		if po.Username != "" {
			// Basic at once, as go-git: curl's "anyauth" asks first
			// without credentials.
			cfg = append(cfg, [2]string{"http.proxyAuthMethod", "basic"})
		}
		env = append(env, "NO_PROXY=", "no_proxy=")
	}
	return cfg, env, nil
}

// TailBuffer keeps the last 4 KiB written to it: what a git command
// writes on stderr, which a remote's progress messages can make endless.
type TailBuffer struct{ b []byte }

const tailKeep = 4 << 10

func (t *TailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) > tailKeep {
		p = p[len(p)-tailKeep:]
	}
	if over := len(t.b) + len(p) - tailKeep; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	t.b = append(t.b, p...)
	return n, nil
}

func (t *TailBuffer) String() string { return string(t.b) }
