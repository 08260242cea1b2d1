module github.com/sluicehq/sluice/services/reaper

go 1.26.0
