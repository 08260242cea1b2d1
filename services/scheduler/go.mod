module github.com/sluicehq/sluice/services/scheduler

go 1.26.0

require (
	github.com/sluicehq/sluice/pkg/bus v0.0.0
	github.com/sluicehq/sluice/pkg/contracts v0.0.0
	github.com/sluicehq/sluice/pkg/observe v0.0.0
	github.com/sluicehq/sluice/pkg/store v0.0.0
)

require (
	github.com/caarlos0/env/v11 v11.4.2 // indirect
	github.com/cenkalti/backoff/v4 v4.3.0 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/mattn/go-colorable v0.1.14 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/nats-io/nats.go v1.55.0 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	github.com/rs/zerolog v1.35.1 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

replace (
	github.com/sluicehq/sluice/pkg/bus => ../../pkg/bus
	github.com/sluicehq/sluice/pkg/contracts => ../../pkg/contracts
	github.com/sluicehq/sluice/pkg/observe => ../../pkg/observe
	github.com/sluicehq/sluice/pkg/store => ../../pkg/store
)
