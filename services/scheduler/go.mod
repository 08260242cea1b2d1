module github.com/sluicehq/sluice/services/scheduler

go 1.26.0
