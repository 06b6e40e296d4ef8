package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// credentialSocketEnv names the socket the program's credential helper
// asks when it is given no credentials of its own: the credentials
// --askpass-url answered, for the repository whatever its scheme, as
// git-sync hands them to git (git credential approve, into git's
// credential cache): a --git that asks git's credential helpers (git
// credential fill) gets them. Kept in memory, never on disk, as git's
// cache keeps them; the socket is in a directory of the process's alone.
const credentialSocketEnv = "GITSYNC_CREDENTIAL_SOCKET"

// credentialSocket serves the credentials it was last given to the
// program's credential helper, on a Unix socket.
type credentialSocket struct {
	dir  string
	ln   net.Listener
	wg   sync.WaitGroup
	log  logr.Logger
	mu   sync.Mutex
	cred *credential
}

// listenCredentials starts the socket, in a new private directory.
func listenCredentials(log logr.Logger) (*credentialSocket, error) {
	dir, err := os.MkdirTemp("", "gitsync-credentials-") // 0700
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("unix", filepath.Join(dir, "socket"))
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s := &credentialSocket{dir: dir, ln: ln, log: log}
	s.wg.Go(s.accept)
	return s, nil
}

// path is the socket's path.
func (s *credentialSocket) path() string { return filepath.Join(s.dir, "socket") }

// set replaces the credential served.
func (s *credentialSocket) set(c credential) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cred = &c
}

// close stops the socket and waits for the answers under way.
func (s *credentialSocket) close() {
	_ = s.ln.Close()
	s.wg.Wait()
	_ = os.RemoveAll(s.dir)
}

func (s *credentialSocket) accept() {
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			return // closed
		}
		s.wg.Go(func() {
			defer conn.Close()
			if err := s.answer(conn); err != nil {
				s.log.V(1).Info("credential request not answered", "error", err.Error())
			}
		})
	}
}

// answer reads a request of git's (key=value lines, up to an empty one)
// and writes the credential, when it serves the request, or nothing.
func (s *credentialSocket) answer(conn net.Conn) error {
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	req, err := readCredentialRequest(conn)
	if err != nil {
		return err
	}
	s.mu.Lock()
	c := s.cred
	s.mu.Unlock()
	if c == nil || c.matches(req["protocol"], req["host"], req["path"]) == 0 {
		return nil
	}
	return writeCredential(conn, *c)
}

// readCredentialRequest reads git's key=value lines up to an empty one
// (64 KiB at most).
func readCredentialRequest(in io.Reader) (map[string]string, error) {
	req := map[string]string{}
	sc := bufio.NewScanner(io.LimitReader(in, 64<<10))
	for sc.Scan() && sc.Text() != "" {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			req[k] = v
		}
	}
	return req, sc.Err()
}

// askCredentialSocket is the helper's "get" through the socket: req is
// sent, the answer copied to out.
func askCredentialSocket(ctx context.Context, socket string, req map[string]string, out io.Writer) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	for _, k := range []string{"protocol", "host", "path"} {
		fmt.Fprintf(&b, "%s=%s\n", k, req[k])
	}
	b.WriteString("\n")
	if _, err := io.WriteString(conn, b.String()); err != nil {
		return err
	}
	_, err = io.Copy(out, io.LimitReader(conn, 64<<10))
	return err
}
