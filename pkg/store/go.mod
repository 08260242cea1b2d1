module github.com/sluicehq/sluice/pkg/store

go 1.26.0

require (
	github.com/google/uuid v1.6.0
	github.com/sluicehq/sluice/pkg/contracts v0.0.0
	github.com/stretchr/testify v1.12.1
	modernc.org/sqlite v1.50.0
)

require (
	github.com/dustin/go-humanize v1.0.1 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/ncruces/go-strftime v1.0.0 // indirect
	github.com/remyoudompheng/bigfft v0.0.0-20230129092748-24d4a6f8daec // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.42.0 // indirect
	modernc.org/libc v1.72.0 // indirect
	modernc.org/mathutil v1.7.1 // indirect
	modernc.org/memory v1.11.0 // indirect
)

replace github.com/sluicehq/sluice/pkg/contracts => ../contracts
