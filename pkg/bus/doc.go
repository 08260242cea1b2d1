// Package bus is how Sluice services reach NATS: connecting with backoff,
// running an embedded server with JetStream, and declaring the job stream
// and its durable consumers. Subjects and message types live in contracts;
// this package only moves bytes.
package bus
