module github.com/sluicehq/sluice/pkg/store

go 1.26

require github.com/sluicehq/sluice/pkg/contracts v0.0.0

replace github.com/sluicehq/sluice/pkg/contracts => ../contracts
