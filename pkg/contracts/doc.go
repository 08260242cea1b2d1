// Package contracts holds everything the Sluice services agree on: NATS
// subjects and stream names, the messages they exchange (snake_case JSON),
// the job state machine, error classes and the HTTP error body.
//
// It uses only the standard library so that any service, tool or test can
// depend on it without pulling in a driver. No other package spells a
// subject, a state or an error class by hand.
package contracts
