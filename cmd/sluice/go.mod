module github.com/sluicehq/sluice/cmd/sluice

go 1.26.0
