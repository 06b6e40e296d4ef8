package dir_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing/fstest"

	"github.com/modwatch/modwatch/gitutil"
	"github.com/modwatch/modwatch/sink/dir"
	"github.com/modwatch/modwatch/watcher"
)

// Each commit of a target is published as a whole new tree, and the
// target's link is swapped to it at once.
func ExampleSink_Deliver() {
	root, _ := os.MkdirTemp("", "published")
	defer os.RemoveAll(root)
	publish := dir.New(root)
	target := watcher.Target{ID: "team-a/app", URL: "https://git.example.com/app.git", Path: "deploy"}

	for i, files := range []fstest.MapFS{
		{"app.yaml": {Data: []byte("replicas: 1\n")}, "extra/cm.yaml": {Data: []byte("kind: ConfigMap\n")}},
		{"app.yaml": {Data: []byte("replicas: 2\n")}},
	} {
		c := watcher.Change{Target: target, To: gitutil.Hash{byte(i + 1)}, Reason: watcher.ReasonNewCommit, FS: files}
		if err := publish.Deliver(context.Background(), c); err != nil {
			fmt.Println(err)
			return
		}
		link := publish.Path(target)
		fmt.Println(filepath.Base(link) + ":")
		_ = fs.WalkDir(os.DirFS(link), ".", func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				data, _ := os.ReadFile(filepath.Join(link, p))
				fmt.Printf("  %s: %s", p, data)
			}
			return err
		})
	}
	// Output:
	// team-a_app:
	//   app.yaml: replicas: 1
	//   extra/cm.yaml: kind: ConfigMap
	// team-a_app:
	//   app.yaml: replicas: 2
}
