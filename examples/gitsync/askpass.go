package main

import (
	"context"
	"fmt"
	"net/url"
	"sync"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/gitutil/mirror"
	"github.com/modwatch/modwatch/watcher"
)

// askpass is --askpass-url asked before each sync attempt, as git-sync asks
// it at the start of each sync: the listing of the repository that begins
// each poll asks it first (see mirrorDirs.ListRefs), and the poll's fetches
// send what it answered (see askedMirror). A failed call fails that
// attempt, and a wrong answer fails it at the remote; either is one failure
// against --max-failures, and the next attempt asks again.
//
// The answer is kept in memory only: git gets it from the credential
// socket (as from git-sync's git credential approve), go-git from the
// listing's and the fetches' arguments, over http(s), the one transport
// git itself sends a password over.
type askpass struct {
	ask   func(context.Context) (*gitutil.Auth, error)
	repo  string            // --repo, whose credentials they are
	creds *credentialSocket // nil in tests that need no git of their own
	heard func(error)       // each call's outcome (git-sync's askpass metric)

	mu   sync.Mutex
	last *gitutil.Auth // the last answer, over http(s); nil before one
}

// refresh asks the URL; what it answers is served to git for the
// repository from now on, and sent by go-git (see auth).
func (a *askpass) refresh(ctx context.Context) error {
	answer, err := a.ask(ctx)
	if a.heard != nil && ctx.Err() == nil {
		a.heard(err)
	}
	if err != nil {
		return err
	}
	if a.creds != nil {
		a.creds.set(credential{URL: a.repo, Username: answer.Username, Password: answer.Password})
	}
	if u, err := url.Parse(a.repo); err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil // go-git's transports of other schemes take none
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.last = answer
	return nil
}

// auth is what a request of this attempt sends: the last answer over
// http(s), given otherwise (the target's: ssh keys, say).
func (a *askpass) auth(given *gitutil.Auth) *gitutil.Auth {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.last != nil {
		return a.last
	}
	return given
}

// askedMirrorOf is what the watcher and the worktrees read of the
// repository's mirror: gitutil's, whose abilities askedMirror keeps.
type askedMirrorOf interface {
	watcher.Mirror
	watcher.PathFetcher
	trimmer
	Kept() mirror.KeptStats
}

// askedMirror is the repository's mirror with --askpass-url: its fetches
// send the answer the attempt's listing had. A fetch of a commit no ref
// names follows no listing (a --ref that is a hash lists nothing): it asks
// itself.
type askedMirror struct {
	askedMirrorOf
	a *askpass
}

var (
	_ watcher.PathFetcher = askedMirror{}
	_ trimmer             = askedMirror{}
)

// FetchListed implements watcher.MirrorFetcher.
func (m askedMirror) FetchListed(ctx context.Context, auth *gitutil.Auth, listed map[string]gitutil.Hash) (mirror.FetchResult, error) {
	return m.askedMirrorOf.FetchListed(ctx, m.a.auth(auth), listed)
}

// FetchCommit implements watcher.MirrorFetcher.
func (m askedMirror) FetchCommit(ctx context.Context, auth *gitutil.Auth, commit gitutil.Hash) (mirror.FetchResult, error) {
	if err := m.a.refresh(ctx); err != nil {
		return mirror.FetchResult{}, err
	}
	return m.askedMirrorOf.FetchCommit(ctx, m.a.auth(auth), commit)
}

// FetchPaths implements watcher.PathFetcher.
func (m askedMirror) FetchPaths(ctx context.Context, auth *gitutil.Auth, commit gitutil.Hash, paths []string) error {
	return m.askedMirrorOf.FetchPaths(ctx, m.a.auth(auth), commit, paths)
}

// Deepen deepens the mirror with the last answer (the worktrees' fetch of
// --depth, after the poll that fetched the commit).
func (m askedMirror) Deepen(ctx context.Context, auth *gitutil.Auth, commit gitutil.Hash, depth int) (bool, error) {
	return m.askedMirrorOf.Deepen(ctx, m.a.auth(auth), commit, depth)
}

// asked wraps the repository's mirror for --askpass-url.
func (a *askpass) asked(m watcher.Mirror) (watcher.Mirror, error) {
	of, ok := m.(askedMirrorOf)
	if !ok {
		return nil, fmt.Errorf("--askpass-url: a mirror of %T cannot send its answers", m)
	}
	return askedMirror{of, a}, nil
}
