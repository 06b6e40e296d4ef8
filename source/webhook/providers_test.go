package webhook

import (
	"bytes"
	"errors"
	"io"
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

func FuzzReadEvents(f *testing.F) {
	f.Add([]byte("event: hint\ndata: {\"repository\": \"https://h/r\"}\n\n"))
	f.Add([]byte(": ping\n\nevent: close\ndata: {\"reason\": \"max-age\"}\n\n"))
	f.Add([]byte("data: https://h/r\r\n\r\ndata: a\ndata: b\n\n"))
	f.Add([]byte("event: hint\ndata: {\"repository\": 5}\n\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		err := readEvents(bytes.NewReader(body), func(u string) {
			if strings.TrimSpace(u) == "" {
				t.Fatalf("empty hint from %q", body)
			}
		}, func() {})
		if err == nil {
			t.Fatal("readEvents returned without a reason")
		}
	})
}

func TestReadEvents(t *testing.T) {
	var hints []string
	err := readEvents(strings.NewReader(": hi\n\nevent: hint\ndata: {\"repository\": \"https://h/a\"}\n\ndata: https://h/b\n\nevent: other\ndata: x\n\nevent: close\ndata: {}\n\ndata: https://h/never\n\n"),
		func(u string) { hints = append(hints, u) }, func() {})
	if !errors.Is(err, errClosed) {
		t.Fatalf("err = %v, want errClosed", err)
	}
	if strings.Join(hints, " ") != "https://h/a https://h/b" {
		t.Fatalf("hints = %q", hints)
	}
	err = readEvents(strings.NewReader("data: "+strings.Repeat("x", maxEventBytes+1)+"\n\n"), func(string) {}, func() {})
	if err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("an oversized line was accepted: %v", err)
	}
}
