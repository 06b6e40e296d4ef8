package gitutil

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// cliFetch fetches refs into the mirror with the git CLI. It is used for
// the first fetch into an empty mirror only: go-git's full first fetch of a
// large repository takes several times the CLI's time and memory, while its
// incremental fetches are as cheap. Credentials reach git through the
// environment and private temporary files, never its command line.
func (m *Mirror) cliFetch(ctx context.Context, e Endpoint, a *Auth, refs []string) error {
	if a == nil {
		a = &Auth{}
	}
	if a.SSHPassphrase != "" {
		return fmt.Errorf("git CLI cannot use a passphrase-protected key non-interactively")
	}
	tmp, err := os.MkdirTemp("", "modwatch-git-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	var cfg [][2]string
	env := append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=", "SSH_ASKPASS=", "GIT_PROTOCOL=version=2")
	switch e.Scheme {
	case "http", "https":
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
				return err
			}
			cfg = append(cfg, [2]string{"http.sslCAInfo", p})
		}
		if a.InsecureSkipTLSVerify {
			cfg = append(cfg, [2]string{"http.sslVerify", "false"})
		}
	case "ssh":
		key, kh := filepath.Join(tmp, "key"), filepath.Join(tmp, "known_hosts")
		if err := os.WriteFile(key, a.SSHPrivateKey, 0o600); err != nil {
			return err
		}
		if err := os.WriteFile(kh, a.KnownHosts, 0o600); err != nil {
			return err
		}
		strict := "yes"
		if a.InsecureIgnoreHostKey {
			strict, kh = "no", os.DevNull
		}
		env = append(env, fmt.Sprintf("GIT_SSH_COMMAND=ssh -F /dev/null -i %s -o IdentitiesOnly=yes -o UserKnownHostsFile=%s -o StrictHostKeyChecking=%s -o BatchMode=yes", key, kh, strict))
	}
	env = append(env, fmt.Sprintf("GIT_CONFIG_COUNT=%d", len(cfg)))
	for i, kv := range cfg {
		env = append(env, fmt.Sprintf("GIT_CONFIG_KEY_%d=%s", i, kv[0]), fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", i, kv[1]))
	}

	args := []string{"-C", m.dir, "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--", m.url}
	for _, r := range refs {
		args = append(args, "+"+r+":"+r)
	}
	cmd := exec.CommandContext(ctx, m.opts.GitCLI, args...)
	cmd.Env = env
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(out.String())
		if len(msg) > 1024 {
			msg = msg[len(msg)-1024:]
		}
		return fmt.Errorf("git fetch: %w: %s", err, scrub(msg, m.url))
	}
	return nil
}
