package gittest

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// SSHServer serves a Server's repositories over SSH on loopback, running
// git-upload-pack for clients whose public key is authorized.
type SSHServer struct {
	srv     *Server
	ln      net.Listener
	hostKey ssh.PublicKey
	wg      sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// StartSSH starts an SSH server for s that accepts only the authorized key;
// it stops when the test ends.
func (s *Server) StartSSH(t TB, authorized ssh.PublicKey) *SSHServer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatalf("gittest: %v", err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatalf("gittest: %v", err)
	}
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if string(key.Marshal()) == string(authorized.Marshal()) {
				return nil, nil
			}
			return nil, errors.New("key not authorized")
		},
	}
	cfg.AddHostKey(signer)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("gittest: %v", err)
	}
	ss := &SSHServer{srv: s, ln: ln, hostKey: signer.PublicKey(), conns: map[net.Conn]struct{}{}}
	ss.wg.Go(func() { ss.accept(cfg) })
	t.Cleanup(ss.close)
	return ss
}

// URL is the ssh:// URL of the repository at name ("group/app.git").
func (ss *SSHServer) URL(name string) string {
	return fmt.Sprintf("ssh://git@%s/%s", ss.ln.Addr(), name)
}

// KnownHosts is a known_hosts line for this server's host key.
func (ss *SSHServer) KnownHosts() []byte {
	return []byte(knownhosts.Line([]string{knownhosts.Normalize(ss.ln.Addr().String())}, ss.hostKey) + "\n")
}

func (ss *SSHServer) close() {
	_ = ss.ln.Close()
	ss.mu.Lock()
	for c := range ss.conns {
		_ = c.Close()
	}
	ss.mu.Unlock()
	ss.wg.Wait()
}

func (ss *SSHServer) accept(cfg *ssh.ServerConfig) {
	for {
		c, err := ss.ln.Accept()
		if err != nil {
			return
		}
		ss.mu.Lock()
		ss.conns[c] = struct{}{}
		ss.mu.Unlock()
		ss.wg.Go(func() {
			defer func() {
				ss.mu.Lock()
				delete(ss.conns, c)
				ss.mu.Unlock()
				_ = c.Close()
			}()
			ss.serve(c, cfg)
		})
	}
}

func (ss *SSHServer) serve(c net.Conn, cfg *ssh.ServerConfig) {
	conn, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	defer conn.Close()
	ss.wg.Go(func() { ssh.DiscardRequests(reqs) })
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only sessions")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		ss.wg.Go(func() { ss.session(ch, creqs) })
	}
}

// session runs the one git-upload-pack a git client asks for.
func (ss *SSHServer) session(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	var env []string
	for req := range reqs {
		switch req.Type {
		case "env":
			var kv struct{ Name, Value string }
			if ssh.Unmarshal(req.Payload, &kv) == nil && kv.Name == "GIT_PROTOCOL" {
				env = append(env, "GIT_PROTOCOL="+kv.Value)
			}
			_ = req.Reply(true, nil)
		case "exec":
			var cmd struct{ Command string }
			if err := ssh.Unmarshal(req.Payload, &cmd); err != nil {
				_ = req.Reply(false, nil)
				return
			}
			dir, ok := ss.repoDir(cmd.Command)
			if !ok {
				_ = req.Reply(false, nil)
				return
			}
			_ = req.Reply(true, nil)
			code := ss.uploadPack(ch, dir, env)
			_, _ = ch.SendRequest("exit-status", false, binary.BigEndian.AppendUint32(nil, uint32(code)))
			return
		default:
			_ = req.Reply(false, nil)
		}
	}
}

// repoDir maps "git-upload-pack '/group/app.git'" to a directory under the
// server's root; anything else is refused.
func (ss *SSHServer) repoDir(command string) (string, bool) {
	name, arg, ok := strings.Cut(command, " ")
	if !ok || name != "git-upload-pack" {
		return "", false
	}
	p := strings.Trim(strings.TrimSpace(arg), "'\"")
	p = filepath.Clean("/" + p)
	return filepath.Join(ss.srv.root, p), true
}

func (ss *SSHServer) uploadPack(ch ssh.Channel, dir string, env []string) int {
	cmd := exec.Command("git", "upload-pack", "--strict", dir)
	cmd.Env = append(gitEnv(ss.srv.root), env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = ch, ch, ch.Stderr()
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.ExitCode()
	default:
		_, _ = io.WriteString(ch.Stderr(), err.Error())
		return 128
	}
}
