// Package docs keeps the repository's documentation true to the code: its
// tests check that every relative link of README.md and docs/ resolves,
// that docs/operations.md lists every metric a service registers, that
// docs/architecture.md lists exactly the state machine's transitions, and
// that every curl example sends what the API accepts. Curls finds those
// examples; the end-to-end tests of devstack run README.md's against a
// whole stack.
package docs
