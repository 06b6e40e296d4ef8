package webhook

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
)

// provider is one kind of webhook: how to recognise, verify and read it.
type provider struct {
	name        string
	eventHeader string
	enabled     bool
	events      []string // events that are pushes; others are acknowledged and ignored
	verify      func(hdr http.Header, body []byte) (int, error)
	urls        func(body []byte) ([]string, error)
}

func (p *provider) handles(event string) bool {
	return p.events == nil || slices.Contains(p.events, event)
}

// providers lists the providers most specific first: Gitea and Forgejo also
// send GitHub's and Gogs' headers, for compatibility.
func providers(c Config) []provider {
	hmacHeader := func(secret, header, prefix string) func(http.Header, []byte) (int, error) {
		return func(hdr http.Header, body []byte) (int, error) {
			return verifyHMAC(secret, hdr.Get(header), prefix, body)
		}
	}
	return []provider{
		{
			name: "forgejo", eventHeader: "X-Forgejo-Event", enabled: c.GiteaSecret != "",
			events: []string{"push", "create"},
			verify: hmacHeader(c.GiteaSecret, "X-Forgejo-Signature", ""),
			urls:   giteaURLs,
		},
		{
			name: "gitea", eventHeader: "X-Gitea-Event", enabled: c.GiteaSecret != "",
			events: []string{"push", "create"},
			verify: hmacHeader(c.GiteaSecret, "X-Gitea-Signature", ""),
			urls:   giteaURLs,
		},
		{
			name: "gogs", eventHeader: "X-Gogs-Event", enabled: c.GogsSecret != "",
			events: []string{"push", "create"},
			verify: hmacHeader(c.GogsSecret, "X-Gogs-Signature", ""),
			urls:   giteaURLs,
		},
		{
			name: "gitlab", eventHeader: "X-Gitlab-Event", enabled: c.GitLabToken != "",
			events: []string{"Push Hook", "Tag Push Hook"},
			verify: func(hdr http.Header, _ []byte) (int, error) {
				return verifyToken(c.GitLabToken, hdr.Get("X-Gitlab-Token"))
			},
			urls: gitlabURLs,
		},
		{
			name: "github", eventHeader: "X-GitHub-Event", enabled: c.GitHubSecret != "",
			events: []string{"push", "create"},
			verify: hmacHeader(c.GitHubSecret, "X-Hub-Signature-256", "sha256="),
			urls:   githubURLs,
		},
		{
			name: "bitbucket", eventHeader: "X-Event-Key", enabled: c.BitbucketSecret != "",
			events: []string{"repo:push", "repo:refs_changed"},
			verify: hmacHeader(c.BitbucketSecret, "X-Hub-Signature", "sha256="),
			urls:   bitbucketURLs,
		},
		{
			name: "generic", eventHeader: "X-Signature", enabled: c.GenericSecret != "",
			events: nil, // every signed generic request is a push
			verify: hmacHeader(c.GenericSecret, "X-Signature", "sha256="),
			urls:   genericURLs,
		},
	}
}

var errNoURL = errors.New("no repository URL in the payload")

// collect keeps the distinct non-empty strings in order, or fails when
// there are none. It is linear in the number of strings.
func collect(urls ...string) ([]string, error) {
	var out []string
	seen := make(map[string]struct{}, min(len(urls), 64))
	for _, u := range urls {
		u = strings.TrimSpace(u)
		if _, dup := seen[u]; u == "" || dup {
			continue
		}
		seen[u] = struct{}{}
		out = append(out, u)
	}
	if len(out) == 0 {
		return nil, errNoURL
	}
	return out, nil
}

// githubURLs reads a push or create event.
func githubURLs(body []byte) ([]string, error) {
	var p struct {
		Repository struct {
			CloneURL string `json:"clone_url"`
			SSHURL   string `json:"ssh_url"`
			GitURL   string `json:"git_url"`
			HTMLURL  string `json:"html_url"`
		} `json:"repository"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, err
	}
	r := p.Repository
	return collect(r.CloneURL, r.SSHURL, r.HTMLURL, r.GitURL)
}

// gitlabURLs reads a push or tag push event.
func gitlabURLs(body []byte) ([]string, error) {
	var p struct {
		Project struct {
			GitHTTPURL string `json:"git_http_url"`
			GitSSHURL  string `json:"git_ssh_url"`
			WebURL     string `json:"web_url"`
		} `json:"project"`
		Repository struct {
			GitHTTPURL string `json:"git_http_url"`
			GitSSHURL  string `json:"git_ssh_url"`
			Homepage   string `json:"homepage"`
		} `json:"repository"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, err
	}
	return collect(p.Project.GitHTTPURL, p.Project.GitSSHURL, p.Project.WebURL,
		p.Repository.GitHTTPURL, p.Repository.GitSSHURL, p.Repository.Homepage)
}

// giteaURLs reads a Gitea, Forgejo or Gogs push or create event.
func giteaURLs(body []byte) ([]string, error) {
	var p struct {
		Repository struct {
			CloneURL string `json:"clone_url"`
			SSHURL   string `json:"ssh_url"`
			HTMLURL  string `json:"html_url"`
		} `json:"repository"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, err
	}
	return collect(p.Repository.CloneURL, p.Repository.SSHURL, p.Repository.HTMLURL)
}

// bitbucketURLs reads a Bitbucket Cloud repo:push (links.html, full_name)
// or a Bitbucket Server repo:refs_changed (links.clone[]) event.
func bitbucketURLs(body []byte) ([]string, error) {
	type link struct {
		Href string `json:"href"`
		Name string `json:"name"`
	}
	var p struct {
		Repository struct {
			FullName string `json:"full_name"`
			// Cloud has "html": {href}; Server has "clone": [{href, name}].
			Links struct {
				HTML  json.RawMessage `json:"html"`
				Clone json.RawMessage `json:"clone"`
			} `json:"links"`
		} `json:"repository"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, err
	}
	r := p.Repository
	var urls []string
	var clone []link
	if len(r.Links.Clone) > 0 && json.Unmarshal(r.Links.Clone, &clone) == nil {
		for _, l := range clone {
			urls = append(urls, l.Href)
		}
	}
	// Cloud: "html": {"href": ...}; clone URLs follow from it.
	var html link
	if len(r.Links.HTML) > 0 && json.Unmarshal(r.Links.HTML, &html) == nil && html.Href != "" {
		urls = append(urls, html.Href)
		if host, ok := strings.CutPrefix(html.Href, "https://"); ok && r.FullName != "" {
			if i := strings.IndexByte(host, '/'); i > 0 {
				urls = append(urls, "git@"+host[:i]+":"+r.FullName+".git")
			}
		}
	}
	return collect(urls...)
}

// genericURLs reads {"repository": URL} or {"repositories": [URL...]}.
func genericURLs(body []byte) ([]string, error) {
	var p struct {
		Repository   string   `json:"repository"`
		Repositories []string `json:"repositories"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, err
	}
	return collect(append([]string{p.Repository}, p.Repositories...)...)
}
