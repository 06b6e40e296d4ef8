package main

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/modwatch/modwatch/gitutil"
)

// git-sync's SSH defaults: the key and known_hosts of its SSH guide's
// Secret, mounted at /etc/git-secret, with host keys checked.
const (
	defaultSSHKeyFile     = "/etc/git-secret/ssh"
	defaultKnownHostsFile = "/etc/git-secret/known_hosts"
)

// isSSH reports whether repo is reached over SSH (ssh:// or user@host:path).
func isSSH(repo string) bool {
	e, err := gitutil.ParseURL(repo)
	return err == nil && e.Scheme == "ssh"
}

// checkSSH notes at start what git-sync's SSH settings do here: the key
// files that are not there (ssh skips a missing -i, and so does this
// program, but says so), and settings given for a repository that is not
// reached over SSH (they serve its SSH submodules only).
func (c *config) checkSSH() {
	if !isSSH(c.repo) {
		if !c.sshDefaults() {
			c.notes = append(c.notes, "--repo is not an SSH repository: the SSH settings serve its SSH submodules only")
		}
		return
	}
	for _, f := range c.sshKeyFiles {
		if _, err := os.Stat(f); errors.Is(err, fs.ErrNotExist) {
			c.notes = append(c.notes, fmt.Sprintf("--ssh-key-file %s is not there: not offered", f))
		}
	}
	if !c.sshKnownHosts {
		c.notes = append(c.notes, "--ssh-known-hosts=false: host keys are not checked")
	}
}

// sshDefaults reports whether the SSH settings are git-sync's defaults.
func (c *config) sshDefaults() bool {
	return len(c.sshKeyFiles) == 1 && c.sshKeyFiles[0] == defaultSSHKeyFile && c.knownHosts == defaultKnownHostsFile && c.sshKnownHosts
}

// sshAuth reads the key files that are there into a, in their order, and
// the known hosts (unless --ssh-known-hosts=false), for an SSH --repo.
func (c config) sshAuth(a *gitutil.Auth) error {
	for _, f := range c.sshKeyFiles {
		key, err := readMounted(f)
		if errors.Is(err, fs.ErrNotExist) {
			continue // said at start
		}
		if err != nil {
			return fmt.Errorf("--ssh-key-file: %w", err)
		}
		if a.SSHPrivateKey == nil {
			a.SSHPrivateKey = key
		} else {
			a.SSHPrivateKeys = append(a.SSHPrivateKeys, key)
		}
	}
	if a.SSHPrivateKey == nil {
		return fmt.Errorf("--ssh-key-file: none of %s is there: an SSH repository needs a key", strings.Join(c.sshKeyFiles, ", "))
	}
	if !c.sshKnownHosts {
		a.InsecureIgnoreHostKey = true
		return nil
	}
	kh, err := readMounted(c.knownHosts)
	if err != nil {
		return fmt.Errorf("--ssh-known-hosts-file (host keys are checked: --ssh-known-hosts=false does not): %w", err)
	}
	a.KnownHosts = kh
	return nil
}

// sshCommand is git's GIT_SSH_COMMAND for the git this program runs in
// root (submodules over SSH), as git-sync sets it: $GIT_SSH_COMMAND or
// ssh, each key file's -i, and the host key checking.
func (c config) sshCommand(environ string) string {
	cmd := environ
	if cmd == "" {
		cmd = "ssh"
	}
	for _, f := range c.sshKeyFiles {
		cmd += " -i " + f
	}
	if c.sshKnownHosts {
		return cmd + " -o StrictHostKeyChecking=yes -o UserKnownHostsFile=" + c.knownHosts
	}
	return cmd + " -o StrictHostKeyChecking=no"
}

// addUser adds a record of the process's uid and gid to passwd unless
// the uid has one, as git-sync's --add-user: ssh looks its user up.
func addUser(passwd string) error {
	uid := strconv.Itoa(os.Getuid())
	data, err := os.ReadFile(passwd)
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Split(line, ":"); len(f) > 2 && f[2] == uid {
			return nil
		}
	}
	f, err := os.OpenFile(passwd, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	home := cmp.Or(os.Getenv("HOME"), "/tmp")
	_, err = fmt.Fprintf(f, "git-sync:x:%s:%d::%s:/sbin/nologin\n", uid, os.Getgid(), home)
	return errors.Join(err, f.Close())
}
