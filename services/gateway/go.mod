module github.com/sluicehq/sluice/services/gateway

go 1.26.0
