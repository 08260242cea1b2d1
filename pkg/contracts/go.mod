module github.com/sluicehq/sluice/pkg/contracts

go 1.26.0
