module github.com/sluicehq/sluice/services/worker

go 1.26.0
