package webhook

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func FuzzPayloads(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.json"))
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"repository": {"links": {"clone": "x", "html": []}}}`))
	f.Add([]byte(`{"repositories": [null, "", " "]}`))
	f.Add([]byte(`null`))
	ps := providers(Config{GitHubSecret: "s", GitLabToken: "s", GiteaSecret: "s", GogsSecret: "s", BitbucketSecret: "s", GenericSecret: "s"})
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, p := range ps {
			urls, err := p.urls(body)
			if err != nil {
				continue
			}
			if len(urls) == 0 {
				t.Fatalf("%s: no error and no URL", p.name)
			}
			seen := map[string]bool{}
			for _, u := range urls {
				if u == "" || u != strings.TrimSpace(u) || seen[u] {
					t.Fatalf("%s: bad or repeated URL %q in %q", p.name, u, urls)
				}
				seen[u] = true
			}
		}
	})
}

func TestSignIsWhatTheGenericProviderChecks(t *testing.T) {
	body := []byte(`{"repository": "https://h/r"}`)
	if _, err := verifyHMAC("k", Sign("k", body), "sha256=", body); err != nil {
		t.Fatal(err)
	}
	if _, err := verifyHMAC("other", Sign("k", body), "sha256=", body); err == nil {
		t.Fatal("a signature with another key was accepted")
	}
}
