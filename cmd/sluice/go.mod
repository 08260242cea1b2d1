module github.com/sluicehq/sluice/cmd/sluice

go 1.26.0

require (
	github.com/sluicehq/sluice/pkg/bus v0.0.0
	github.com/sluicehq/sluice/pkg/contracts v0.0.0
	github.com/sluicehq/sluice/pkg/observe v0.0.0
	github.com/sluicehq/sluice/pkg/store v0.0.0
	github.com/sluicehq/sluice/services/gateway v0.0.0
	github.com/sluicehq/sluice/services/reaper v0.0.0
	github.com/sluicehq/sluice/services/scheduler v0.0.0
	github.com/sluicehq/sluice/services/worker v0.0.0
)

replace (
	github.com/sluicehq/sluice/pkg/bus => ../../pkg/bus
	github.com/sluicehq/sluice/pkg/contracts => ../../pkg/contracts
	github.com/sluicehq/sluice/pkg/observe => ../../pkg/observe
	github.com/sluicehq/sluice/pkg/store => ../../pkg/store
	github.com/sluicehq/sluice/services/gateway => ../../services/gateway
	github.com/sluicehq/sluice/services/reaper => ../../services/reaper
	github.com/sluicehq/sluice/services/scheduler => ../../services/scheduler
	github.com/sluicehq/sluice/services/worker => ../../services/worker
)
