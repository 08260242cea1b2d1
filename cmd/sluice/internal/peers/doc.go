// Package peers compares Sluice's benchmark figures with those of the
// queues a user would pick instead (River on PostgreSQL, Asynq on Redis),
// measured in the same run by the harness beside the repository
// (../shared/peers), and judges the ratios against the targets: what
// `make bench-peers` prints.
package peers
