package static_test

import (
	"fmt"

	"github.com/modwatch/modwatch/source/static"
)

func ExampleParse() {
	_, err := static.Parse([]byte(`
targets:
  - id: app
    url: https://git.example.com/platform/app.git
    path: ../secrets
`))
	fmt.Println(err)
	// Output:
	// static: invalid target file: targets[0].path: mirror: invalid path: "../secrets" contains ".."
}
