package hook_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/sink/hook"
	"github.com/modwatch/modwatch/watcher"
)

// An HTTP hook posts each change as JSON; the URL's credentials never
// reach the body.
func ExamplePost() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Println(r.Method, r.Header.Get("Authorization"), string(body))
	}))
	defer srv.Close()

	notify := hook.Post(srv.URL, hook.WithHeader("Authorization", "Bearer s3cret"))
	err := notify.Deliver(context.Background(), watcher.Change{
		Target: watcher.Target{ID: "app", URL: "https://user:token@git.example.com/app.git", Path: "deploy"},
		Ref:    "refs/heads/main", From: gitutil.Hash{0x11, 0x11}, To: gitutil.Hash{0x22, 0x22}, Reason: watcher.ReasonNewCommit, Paths: []string{"app.yaml"},
	})
	fmt.Println(err)
	// Output:
	// POST Bearer s3cret {"target":"app","url":"https://redacted@git.example.com/app.git","path":"deploy","ref":"refs/heads/main","from":"1111000000000000000000000000000000000000","to":"2222000000000000000000000000000000000000","reason":"NewCommit","paths":["app.yaml"]}
	// <nil>
}
