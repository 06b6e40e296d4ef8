package gitutil

import (
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/url"
	"strings"

	"github.com/modwatch/modwatch/gitutil/internal/protov2"
)

// RefPrefixes are the ref prefixes a listing needs to resolve the
// revision (see [ListRefs]); none for a commit, which needs no
// listing.
func (r Revision) RefPrefixes() []string {
	switch r.Kind {
	case RevisionHead:
		return []string{"HEAD"}
	case RevisionRef:
		return []string{r.Value}
	case RevisionCommit:
		return nil
	case RevisionSemver:
		return []string{"refs/tags/"}
	}
	if r.Semver != nil {
		return []string{"refs/heads/" + r.Value, "refs/tags/"}
	}
	return []string{"refs/heads/" + r.Value, "refs/tags/" + r.Value}
}

// maxListing bounds what a version 2 listing may send.
const maxListing = 64 << 20

// listV2 lists the refs under prefixes with protocol version 2's ls-refs
// over smart HTTP: the capability advertisement, then one command.
//
// The capability advertisement is asked for once per server (scheme and
// host): a version 2 command is complete in itself, so later listings, of
// that repository or another on the same server, are one request, as cheap
// as a version 0 advertisement of a small repository. A command that fails
// where the server was not asked about this repository yet asks it.
func (l *Lister) listV2(ctx context.Context, at repoAddress, t Transport, prefixes []string) (RefList, error) {
	a := t.Auth
	client, err := l.client(t)
	if err != nil {
		return RefList{}, err
	}
	base := strings.TrimSuffix(at.url, "/")
	repo, knownRepo := l.repos.Get(base)
	_, knownServer := l.v2Servers.Get(at.server)
	if !knownRepo && knownServer {
		if repo, err = newV2Repo(base, at); err != nil {
			return RefList{}, err
		}
	}
	if repo != nil {
		refs, err := l.lsRefs(ctx, client, repo, a, prefixes)
		if err == nil || ctx.Err() != nil || answered(err) {
			// An HTTP answer is the server's word on the repository: a
			// failed poll costs the one request.
			if err == nil && !knownRepo {
				l.repos.Add(base, repo)
			}
			return refs, err
		}
		l.repos.Remove(base) // ask for its capabilities again
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/info/refs?service=git-upload-pack", nil)
	if err != nil {
		return RefList{}, err
	}
	setV2Headers(req, a)
	resp, err := client.Do(req)
	if err != nil {
		return RefList{}, err
	}
	caps, err := readV2Caps(resp, at.ep.Host)
	if err != nil {
		return RefList{}, err
	}
	if _, ok := caps["ls-refs"]; !ok {
		return RefList{}, protov2.ErrNoV2
	}
	if repo, err = newV2Repo(base, at); err != nil {
		return RefList{}, err
	}
	refs, err := l.lsRefs(ctx, client, repo, a, prefixes)
	if err == nil {
		l.repos.Add(base, repo)
		l.v2Servers.Add(at.server, struct{}{})
	}
	return refs, err
}

// v2Repo is a repository listed in version 2: its address and its
// ls-refs request, made once, which each listing copies with its own
// context, headers and body, so that a poll parses no URL.
type v2Repo struct {
	at   repoAddress
	post *http.Request
}

func newV2Repo(base string, at repoAddress) (*v2Repo, error) {
	req, err := http.NewRequest(http.MethodPost, base+"/git-upload-pack", nil)
	if err != nil {
		return nil, err
	}
	req.Header = nil // each listing sets its own
	return &v2Repo{at: at, post: req}, nil
}

// repoAddress is a repository's URL as a listing reads it.
type repoAddress struct {
	url    string // as given
	ep     Endpoint
	server string // scheme and host: what version 2 is known of
}

// addressOf parses repoURL (ParseBareURL), or takes what a listing of the
// same repository in version 2 parsed of it: the same URL but for a
// trailing slash, which only the fallback's listing reads, from url.
func (l *Lister) addressOf(repoURL string) (repoAddress, error) {
	if repo, ok := l.repos.Get(strings.TrimSuffix(repoURL, "/")); ok {
		at := repo.at
		at.url = repoURL
		return at, nil
	}
	e, err := ParseBareURL(repoURL)
	if err != nil {
		return repoAddress{}, err
	}
	return repoAddress{url: repoURL, ep: e, server: e.Scheme + "://" + e.Host}, nil
}

// lsRefs sends the ls-refs command.
//
// It goes to the transport itself: the client adds nothing a listing
// needs (it follows no redirect, keeps no cookie and has no timeout of its
// own) and would copy the request's URL and headers on every poll.
func (l *Lister) lsRefs(ctx context.Context, client *http.Client, repo *v2Repo, a *Auth, prefixes []string) (RefList, error) {
	body, err := protov2.LsRefsRequest(prefixes)
	if err != nil {
		return RefList{}, err
	}
	req := repo.post.WithContext(ctx)
	req.Header = l.postHeader(a)
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	req.ContentLength = int64(len(body))
	resp, err := client.Transport.RoundTrip(req)
	if err != nil {
		// As the client would say it (the URL carries no credentials).
		return RefList{}, &url.Error{Op: "Post", URL: req.URL.String(), Err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return RefList{}, statusError(resp, repo.at.ep.Host, "ls-refs")
	}
	refs, err := protov2.ParseLsRefs[Hash](io.LimitReader(resp.Body, maxListing))
	if err != nil {
		return RefList{}, err
	}
	return RefList{Refs: refs.Refs, Peeled: refs.Peeled, Head: refs.Head}, nil
}

// lsRefsHeader returns the headers of an ls-refs request without
// credentials, which a Lister shares by every such request, and so never
// writes to. The listing is asked for uncompressed: it is a few lines, and
// the transport would otherwise add its own Accept-Encoding to every
// request.
func lsRefsHeader() http.Header {
	return http.Header{
		"Git-Protocol":    {v2Protocol},
		"User-Agent":      {userAgent},
		"Content-Type":    {"application/x-git-upload-pack-request"},
		"Accept":          {"application/x-git-upload-pack-result"},
		"Accept-Encoding": {"identity"},
	}
}

// postHeader returns the headers of an ls-refs request with a's
// credentials: the shared l.header when it has none, else a copy of it
// with its own.
func (l *Lister) postHeader(a *Auth) http.Header {
	if !a.hasSecret() {
		return l.header
	}
	h := maps.Clone(l.header) // setAuthHeader adds a key; it writes no value slice
	setAuthHeader(&http.Request{Header: h}, a)
	return h
}

// The headers every version 2 request carries.
const (
	v2Protocol = "version=2"
	userAgent  = "git/modwatch"
)

func setV2Headers(req *http.Request, a *Auth) {
	req.Header.Set("Git-Protocol", v2Protocol)
	req.Header.Set("User-Agent", userAgent)
	setAuthHeader(req, a)
}

// setAuthHeader sets req's Authorization to a's credentials, if it has any.
func setAuthHeader(req *http.Request, a *Auth) {
	if a == nil {
		return
	}
	switch {
	case a.BearerToken != "":
		req.Header.Set("Authorization", "Bearer "+a.BearerToken)
	case a.Username != "" || a.Password != "":
		user := a.Username
		if user == "" {
			user = "git" // as for go-git's transport (see Auth.Transport)
		}
		req.SetBasicAuth(user, a.Password)
	}
}

// readV2Caps reads the capability advertisement of resp from host
// (protov2.ReadCaps) after its HTTP status.
func readV2Caps(resp *http.Response, host string) (map[string]string, error) {
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, statusError(resp, host, "info/refs")
	}
	return protov2.ReadCaps(io.LimitReader(resp.Body, 1<<20))
}

// httpStatusError is a listing answered with an HTTP error.
type httpStatusError struct {
	code   int
	status string
}

func (e *httpStatusError) Error() string { return e.status }

// answered reports whether err is an HTTP answer other than 200 OK.
func answered(err error) bool {
	var status *httpStatusError
	return errors.As(err, &status) || errors.Is(err, ErrRateLimited)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
