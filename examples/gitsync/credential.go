package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/internal/safefile"
)

// credential is one of git-sync's --credential flags: the user and
// password (or a file holding it) of the repositories at url, for the
// --repo repository and for the submodules git fetches.
type credential struct {
	URL          string `json:"url"`
	Username     string `json:"username"`
	Password     string `json:"password,omitempty"`
	PasswordFile string `json:"password-file,omitempty"`
}

// credentialsFlag is --credential, repeatable, each a JSON object.
type credentialsFlag struct{ into *[]credential }

func (f credentialsFlag) String() string { return "" }

func (f credentialsFlag) Set(v string) error {
	dec := json.NewDecoder(strings.NewReader(v))
	dec.DisallowUnknownFields()
	var c credential
	if err := dec.Decode(&c); err != nil {
		return fmt.Errorf("not a credential object: %w", err)
	}
	if dec.More() {
		return errors.New("one JSON object per --credential")
	}
	u, err := url.Parse(c.URL)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Errorf("url %q: an http(s) URL is required", c.URL)
	case u.User != nil:
		return errors.New("url: credentials go in username and password, not in the URL")
	case c.Username == "":
		return errors.New("username is required")
	case (c.Password == "") == (c.PasswordFile == ""):
		return errors.New("one of password and password-file is required")
	case strings.ContainsAny(c.Username+c.Password, "\r\n\x00"):
		return errors.New("a username or password cannot hold a line break")
	}
	*f.into = append(*f.into, c)
	return nil
}

// maxMountedFile bounds a file a flag names that is read whole: a
// password, a key, a token, known hosts, sparse-checkout patterns. A
// Secret or a ConfigMap holds at most 1 MiB.
const maxMountedFile = 1 << 20

// readMounted reads a file a flag names, through links (a mounted
// Secret's key is one, through ..data) to a regular file only: a named
// pipe or a device is refused, not waited on or read; so is a file over
// maxMountedFile.
func readMounted(path string) ([]byte, error) {
	return safefile.ReadFile(context.Background(), path, maxMountedFile, safefile.Follow)
}

// resolved is the credential with its password read.
func (c credential) resolved() (credential, error) {
	if c.PasswordFile == "" {
		return c, nil
	}
	pw, err := readMounted(c.PasswordFile)
	if err != nil {
		return c, fmt.Errorf("--credential %s: %w", c.URL, err)
	}
	c.Password, c.PasswordFile = strings.TrimRight(string(pw), "\r\n"), ""
	if strings.ContainsAny(c.Password, "\r\n\x00") {
		return c, fmt.Errorf("--credential %s: the password file holds more than one line", c.URL)
	}
	return c, nil
}

// matches reports how well c serves a request for scheme, host and path:
// 0 when it does not (another scheme or host, or a path outside c's),
// else more for a longer path of c's.
func (c credential) matches(scheme, host, path string) int {
	u, err := url.Parse(c.URL)
	if err != nil || u.Scheme != scheme || u.Host != host {
		return 0
	}
	p := strings.Trim(u.Path, "/")
	if p == "" || path == "" {
		return 1
	}
	path = strings.Trim(path, "/")
	if path != p && !strings.HasPrefix(path, p+"/") && strings.TrimSuffix(path, ".git") != p {
		return 0
	}
	return 1 + len(p)
}

// best is the credential of creds that serves the request best.
func best(creds []credential, scheme, host, path string) (credential, bool) {
	var found credential
	score := 0
	for _, c := range creds {
		if s := c.matches(scheme, host, path); s > score {
			found, score = c, s
		}
	}
	return found, score > 0
}

// credentialHelperArg makes the program a git credential helper: git runs
// it, with the credentials in credentialsEnv (set on the git commands
// that fetch submodules only, never the hooks'), to fill in a request.
const (
	credentialHelperArg = "--git-credential-helper"
	credentialsEnv      = "GITSYNC_CREDENTIAL_HELPER_DATA"
)

// credentialHelper is the helper: for "get", it reads git's request
// (key=value lines) and writes the user and password of the credential
// that serves it best, or nothing; "store" and "erase" are read and
// ignored (nothing is kept). It returns the exit code.
func credentialHelper(args []string, in io.Reader, out io.Writer, data string) int {
	req, _ := readCredentialRequest(in)
	if len(args) != 1 || args[0] != "get" {
		return 0
	}
	if socket := os.Getenv(credentialSocketEnv); data == "" && socket != "" {
		// --askpass-url's, asked of the program.
		if err := askCredentialSocket(context.Background(), socket, req, out); err != nil {
			fmt.Fprintln(os.Stderr, "gitsync credential helper:", err)
			return 1
		}
		return 0
	}
	if data == "" {
		return 0
	}
	var creds []credential
	if err := json.Unmarshal([]byte(data), &creds); err != nil {
		fmt.Fprintln(os.Stderr, "gitsync credential helper:", err)
		return 1
	}
	c, ok := best(creds, req["protocol"], req["host"], req["path"])
	if !ok {
		return 0
	}
	if err := writeCredential(out, c); err != nil {
		fmt.Fprintln(os.Stderr, "gitsync credential helper:", err)
		return 1
	}
	return 0
}

// writeCredential writes c as git's credential helpers answer. A username
// or password with a newline or a NUL is refused, as git refuses it: in
// the answer it would be lines of its own (another username, a quit).
func writeCredential(out io.Writer, c credential) error {
	if strings.ContainsAny(c.Username+c.Password, "\r\n\x00") {
		return fmt.Errorf("the credential for %s holds a newline or a NUL", gitutil.RedactURL(c.URL))
	}
	_, err := fmt.Fprintf(out, "username=%s\npassword=%s\n", c.Username, c.Password)
	return err
}
