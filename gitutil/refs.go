package gitutil

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/modwatch/modwatch/gitutil/internal/protov2"
)

// defaultListTimeout bounds a ref listing whose ctx carries no deadline.
const defaultListTimeout = 30 * time.Second

// RefList is a remote's ref advertisement.
type RefList struct {
	// Refs maps full ref names ("refs/heads/main", "refs/tags/v1") to the
	// object they point at: a commit, or the tag object of an annotated tag.
	Refs map[string]Hash
	// Peeled maps the names of annotated tags to the commit they point at.
	Peeled map[string]Hash
	// Head is the ref the remote's HEAD points at ("refs/heads/main"), or ""
	// when the remote did not say.
	Head string
}

// Commit returns the commit a ref names, peeling annotated tags.
func (l RefList) Commit(name string) (Hash, bool) {
	if h, ok := l.Peeled[name]; ok {
		return h, true
	}
	h, ok := l.Refs[name]
	return h, ok
}

// ListRefs lists the refs of the remote at repoURL, as [Lister.ListRefs]
// does, with a Lister of its own that it closes: it keeps nothing, and
// asks a server for its protocol version on every call. A program that
// lists refs again and again holds a [Lister].
func ListRefs(ctx context.Context, repoURL string, auth *Auth, prefixes []string) (RefList, error) {
	l := NewLister()
	defer l.CloseIdleConnections()
	return l.ListRefs(ctx, repoURL, auth, prefixes)
}

// ListRefs lists the refs of the remote at repoURL (the equivalent of git
// ls-remote), with annotated tags peeled. It honours ctx and applies
// [defaultListTimeout] when ctx has no deadline. repoURL carries no
// credentials: they come in auth.
//
// With prefixes ("HEAD", "refs/heads/main", "refs/tags/"), it asks only
// for the refs that start with one of them: over HTTP(S), to a server that
// speaks git's protocol version 2, the listing then carries those refs
// alone instead of the whole advertisement (a repository with a ref per
// pull request advertises tens of thousands). Other servers and transports
// list every ref, as with none; the result may hold refs outside the
// prefixes either way.
func (l *Lister) ListRefs(ctx context.Context, repoURL string, auth *Auth, prefixes []string) (RefList, error) {
	at, err := l.addressOf(repoURL)
	if err != nil {
		return RefList{}, err
	}
	e := at.ep
	t, err := auth.Transport(e)
	if err != nil {
		return RefList{}, fmt.Errorf("list refs of %s: %w", RedactURL(repoURL), err)
	}
	if err := l.HostLimit(e.Host); err != nil {
		return RefList{}, &RemoteError{Op: "list refs", URL: repoURL, Err: err}
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultListTimeout)
		defer cancel()
	}
	if _, old := l.noV2.Get(at.server); len(prefixes) > 0 && (e.Scheme == "http" || e.Scheme == "https") && !old {
		if refs, done, err := l.listV2OrFallBack(ctx, at, t, prefixes); done {
			return refs, err
		}
	}
	remote := git.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: "origin", URLs: []string{repoURL}})
	refs, err := remote.ListContext(ctx, &git.ListOptions{
		Auth:            t.Method,
		CABundle:        t.CABundle,
		InsecureSkipTLS: t.InsecureSkipTLS,
		ProxyOptions:    t.Proxy,
		PeelingOption:   git.AppendPeeled,
	})
	if err != nil {
		if rl := AsRateLimit(err, e.Host); rl != nil {
			err = rl
			l.NoteLimit(rl)
		}
		return RefList{}, &RemoteError{Op: "list refs", URL: repoURL, Err: err}
	}
	return refList(refs), nil
}

// listV2OrFallBack lists the refs under prefixes in protocol version 2;
// done is false when the server answered in a way go-git's version 0
// listing should handle (no version 2, which is remembered for the server,
// or an HTTP answer other than an error: a redirect).
func (l *Lister) listV2OrFallBack(ctx context.Context, at repoAddress, t Transport, prefixes []string) (refs RefList, done bool, err error) {
	repoURL := at.url
	refs, err = l.listV2(ctx, at, t, prefixes)
	var status *httpStatusError
	switch {
	case err == nil:
		return refs, true, nil
	case errors.Is(err, protov2.ErrNoV2):
		l.noV2.Add(at.server, struct{}{}) // asked in version 0 from now on
		return RefList{}, false, nil
	case errors.As(err, &status) && status.code == http.StatusUnauthorized:
		return RefList{}, true, &RemoteError{Op: "list refs", URL: repoURL, Err: transport.ErrAuthenticationRequired}
	case errors.As(err, &status) && status.code == http.StatusForbidden:
		return RefList{}, true, &RemoteError{Op: "list refs", URL: repoURL, Err: transport.ErrAuthorizationFailed}
	case errors.As(err, &status) && status.code == http.StatusNotFound:
		return RefList{}, true, &RemoteError{Op: "list refs", URL: repoURL, Err: transport.ErrRepositoryNotFound}
	case errors.Is(err, ErrRateLimited), errors.As(err, &status) && status.code >= http.StatusBadRequest:
		// The server is there and refuses, or fails: asking again in
		// version 0 would only knock twice more.
		l.NoteLimit(err)
		return RefList{}, true, &RemoteError{Op: "list refs", URL: repoURL, Err: err}
	case errors.As(err, &status):
		// A redirect, a proxy's answer: go-git's listing handles it, or
		// says what it is.
		return RefList{}, false, nil
	default:
		return RefList{}, true, &RemoteError{Op: "list refs", URL: repoURL, Err: err}
	}
}

// refList sorts go-git's advertised refs into a RefList.
func refList(refs []*plumbing.Reference) RefList {
	out := RefList{Refs: make(map[string]Hash, len(refs)), Peeled: map[string]Hash{}}
	for _, r := range refs {
		name := r.Name().String()
		switch {
		case name == "HEAD" && r.Type() == plumbing.SymbolicReference:
			out.Head = r.Target().String()
		case strings.HasSuffix(name, "^{}"):
			out.Peeled[strings.TrimSuffix(name, "^{}")] = Hash(r.Hash())
		case r.Type() == plumbing.HashReference:
			out.Refs[name] = Hash(r.Hash())
		}
	}
	return out
}

// RemoteError is a failed network operation on a remote. Its message carries
// the redacted URL, never a credential.
type RemoteError struct {
	Op  string
	URL string
	Err error
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("%s %s: %s", e.Op, RedactURL(e.URL), scrub(e.Err.Error(), e.URL))
}

func (e *RemoteError) Unwrap() error { return e.Err }

// scrub removes the raw URL (which may carry credentials) from a message
// produced by a lower layer.
func scrub(msg, rawURL string) string {
	if rawURL != "" && rawURL != RedactURL(rawURL) {
		msg = strings.ReplaceAll(msg, rawURL, RedactURL(rawURL))
	}
	return msg
}
