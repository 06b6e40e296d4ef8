module github.com/modwatch/modwatch/internal/dev/release

go 1.26.0

require (
	github.com/stretchr/testify v1.12.1
	golang.org/x/exp v0.0.0-20260908205506-85c1c2202aba
	golang.org/x/mod v0.41.0
	golang.org/x/tools v0.50.0
)

require (
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sync v0.24.0 // indirect
)
