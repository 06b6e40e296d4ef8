package watchertest

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/go-git/go-billy/v5/memfs"
	"github.com/go-git/go-billy/v5/util"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/pktline"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/server"
	"github.com/go-git/go-git/v5/storage/memory"
	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"

	"github.com/modwatch/modwatch/gitutil"
)

// Repo is a git repository in memory, served over smart HTTP on loopback by
// an in-process server (go-git's upload-pack): a test commits to it and a
// watcher fetches from its URL as from any remote. It needs no git binary
// and no network, and is gone when the test ends.
//
//	repo := watchertest.NewRepo(t)
//	commit := repo.Commit(t, map[string]string{"deploy/app.yaml": "kind: ConfigMap"})
//	target := watcher.Target{ID: "app", URL: repo.URL(), Path: "deploy"}
type Repo struct {
	srv *httptest.Server

	mu        sync.RWMutex // commits write the storage, fetches read it
	repo      *git.Repository
	wt        *git.Worktree
	n         int
	signer    *openpgp.Entity
	sshSigner ssh.Signer
}

// NewRepo starts an empty repository whose default branch is "main".
func NewRepo(t testing.TB) *Repo {
	t.Helper()
	st := memory.NewStorage()
	repo, err := git.Init(st, memfs.New())
	if err != nil {
		t.Fatalf("watchertest: init repository: %v", err)
	}
	if err := st.SetReference(plumbing.NewSymbolicReference(plumbing.HEAD, plumbing.NewBranchReferenceName("main"))); err != nil {
		t.Fatalf("watchertest: %v", err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		t.Fatalf("watchertest: %v", err)
	}
	r := &Repo{repo: repo, wt: wt}
	r.srv = httptest.NewServer(r)
	t.Cleanup(r.srv.Close)
	return r
}

// URL is the repository's address, http://127.0.0.1:port/repo.git.
func (r *Repo) URL() string { return r.srv.URL + "/repo.git" }

// Commit writes files (path: content; an empty content removes the path)
// over the tree of main's last commit, commits them to main and returns
// the commit's name.
func (r *Repo) Commit(t testing.TB, files map[string]string) gitutil.Hash {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	fsys := r.wt.Filesystem
	for name, content := range files {
		name = path.Clean(strings.TrimPrefix(name, "/"))
		var err error
		if content == "" {
			if _, serr := fsys.Lstat(name); serr == nil {
				_, err = r.wt.Remove(name)
			}
		} else {
			err = util.WriteFile(fsys, name, []byte(content), 0o644)
			if err == nil {
				_, err = r.wt.Add(name)
			}
		}
		if err != nil {
			t.Fatalf("watchertest: %s: %v", name, err)
		}
	}
	r.n++
	// Commits are a second apart, so that their dates order them as git
	// orders them.
	when := time.Date(2020, 1, 1, 0, 0, r.n, 0, time.UTC)
	sig := &object.Signature{Name: "watchertest", Email: "watchertest@example.com", When: when}
	opts := &git.CommitOptions{Author: sig, Committer: sig, AllowEmptyCommits: true, SignKey: r.signer}
	if r.sshSigner != nil {
		opts.Signer = sshGitSigner{r.sshSigner}
	}
	h, err := r.wt.Commit(fmt.Sprintf("commit %d", r.n), opts)
	if err != nil {
		t.Fatalf("watchertest: commit: %v", err)
	}
	return gitutil.Hash(h)
}

// SignWith makes the next commits signed by key (OpenPGP, as `git commit
// -S` signs); nil makes them unsigned again.
func (r *Repo) SignWith(key *openpgp.Entity) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.signer, r.sshSigner = key, nil
}

// SignWithSSH makes the next commits signed by an SSH key (as git signs
// with gpg.format=ssh, in the namespace "git"); nil makes them unsigned
// again. Tags stay OpenPGP-signed or unsigned.
func (r *Repo) SignWithSSH(key ssh.Signer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.signer, r.sshSigner = nil, key
}

// sshGitSigner signs as git does with an SSH key: an armored SSHSIG over
// the object, SHA-512, namespace "git".
type sshGitSigner struct{ key ssh.Signer }

func (s sshGitSigner) Sign(message io.Reader) ([]byte, error) {
	sig, err := sshsig.Sign(message, s.key, sshsig.HashSHA512, "git")
	if err != nil {
		return nil, err
	}
	return sshsig.Armor(sig), nil
}

// Tag makes an annotated tag name at main's last commit, signed when
// SignWith set a key, and returns the tag object's name.
func (r *Repo) Tag(t testing.TB, name string) gitutil.Hash {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	head, err := r.repo.Head()
	if err != nil {
		t.Fatalf("watchertest: tag %s: %v", name, err)
	}
	r.n++
	when := time.Date(2020, 1, 1, 0, 0, r.n, 0, time.UTC)
	ref, err := r.repo.CreateTag(name, head.Hash(), &git.CreateTagOptions{
		Tagger:  &object.Signature{Name: "watchertest", Email: "watchertest@example.com", When: when},
		Message: "tag " + name, SignKey: r.signer,
	})
	if err != nil {
		t.Fatalf("watchertest: tag %s: %v", name, err)
	}
	return gitutil.Hash(ref.Hash())
}

// Head returns main's last commit, zero before the first.
func (r *Repo) Head() gitutil.Hash {
	r.mu.RLock()
	defer r.mu.RUnlock()
	ref, err := r.repo.Reference(plumbing.NewBranchReferenceName("main"), false)
	if err != nil {
		return gitutil.Hash{}
	}
	return gitutil.Hash(ref.Hash())
}

// ServeHTTP serves the smart HTTP protocol's upload-pack side (version 0,
// what go-git's server speaks; clients asking for version 2 fall back).
func (r *Repo) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	ep, err := transport.NewEndpoint("/repo.git")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	sess, err := server.NewServer(loader{r.repo.Storer}).NewUploadPackSession(ep, nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer sess.Close()
	switch {
	case req.Method == http.MethodGet && req.URL.Path == "/repo.git/info/refs" && req.URL.Query().Get("service") == "git-upload-pack":
		ar, err := sess.AdvertisedReferencesContext(req.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		ar.Prefix = [][]byte{[]byte("# service=git-upload-pack"), pktline.Flush}
		w.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
		w.Header().Set("Cache-Control", "no-cache")
		_ = ar.Encode(w)
	case req.Method == http.MethodPost && req.URL.Path == "/repo.git/git-upload-pack":
		body := io.Reader(http.MaxBytesReader(w, req.Body, 1<<20))
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			defer zr.Close()
			body = zr
		}
		up, err := decodeUploadPack(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		// A have the repository lacks (a client that fetched elsewhere)
		// is ignored, as git does.
		up.Haves = slices.DeleteFunc(up.Haves, func(h plumbing.Hash) bool { return r.repo.Storer.HasEncodedObject(h) != nil })
		resp, err := sess.UploadPack(req.Context(), up)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/x-git-upload-pack-result")
		w.Header().Set("Cache-Control", "no-cache")
		_ = resp.Encode(w)
	default:
		http.NotFound(w, req)
	}
}

// decodeUploadPack reads an upload-pack request: wants and capabilities,
// then the haves (which packp's decoder leaves unread), so that a fetch
// gets only what its haves lack.
func decodeUploadPack(body io.Reader) (*packp.UploadPackRequest, error) {
	data, err := io.ReadAll(body)
	if err != nil {
		return nil, err
	}
	rd := bytes.NewReader(data)
	up := packp.NewUploadPackRequest()
	if err := up.Decode(rd); err != nil {
		return nil, err
	}
	sc := pktline.NewScanner(rd)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if h, ok := bytes.CutPrefix(line, []byte("have ")); ok && plumbing.IsHash(string(h)) {
			up.Haves = append(up.Haves, plumbing.NewHash(string(h)))
		}
	}
	return up, nil
}

// loader serves one storage at every endpoint.
type loader struct{ s storer.Storer }

func (l loader) Load(*transport.Endpoint) (storer.Storer, error) { return l.s, nil }

var _ server.Loader = loader{}
