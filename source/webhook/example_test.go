package webhook_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/modwatch/modwatch/source/webhook"
	"github.com/modwatch/modwatch/watcher"
)

// triggerer stands for the watcher: it reports the repositories a webhook
// asks it to poll.
type triggerer chan string

func (t triggerer) Trigger(url string) bool { t <- url; return true }

// A GitHub push, signed with the webhook's secret, makes the watcher poll
// the pushed repository; a forged one is refused.
func ExampleNew() {
	polls := make(triggerer, 8)
	hooks, err := webhook.New(webhook.Config{GitHubSecret: "s3cret"}, polls) // checks X-Hub-Signature-256
	if err != nil {
		fmt.Println(err)
		return
	}
	defer hooks.Close()

	body := []byte(`{"repository": {"clone_url": "https://github.com/acme/app.git"}}`)
	for _, signature := range []string{webhook.Sign("s3cret", body), webhook.Sign("guess", body)} {
		req := httptest.NewRequest(http.MethodPost, "/hooks", strings.NewReader(string(body)))
		req.Header.Set("X-GitHub-Event", "push")
		req.Header.Set("X-Hub-Signature-256", signature)
		rec := httptest.NewRecorder()
		hooks.ServeHTTP(rec, req)
		fmt.Print(rec.Code, " ", rec.Body.String())
	}
	fmt.Println("poll", <-polls)
	// Output:
	// 202 poll scheduled
	// 403 signature does not match
	// poll https://github.com/acme/app.git
}

// The README's wiring: a verified webhook endpoint, and one subscription to
// a hub for every watched repository. (Compiled, not run.)
func ExampleNewSubscriber() {
	ctx := context.Background()
	w := watcher.New()
	secret, hubURL, token := "s3cret", "https://hub.example.com/events", "t0ken"

	hooks, _ := webhook.New(webhook.Config{GitHubSecret: secret}, w) // checks X-Hub-Signature-256
	http.Handle("/hooks", hooks)

	stream, _ := webhook.NewSSE(webhook.SSEConfig{URL: hubURL, Token: token})
	sub, _ := webhook.NewSubscriber(stream, w, webhook.SubscriberConfig{})
	go sub.Run(ctx) // one subscription for all watched repositories
}
