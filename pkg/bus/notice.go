package bus

import "time"

// What a Notice reports.
const (
	// NoticeConnectFailed: a connection attempt failed; RetryIn says when
	// the next comes.
	NoticeConnectFailed = "connect_failed"
	// NoticeDisconnected: the connection dropped; it reconnects by itself.
	NoticeDisconnected = "disconnected"
	// NoticeReconnected: the connection is back, to URL.
	NoticeReconnected = "reconnected"
	// NoticeAsyncError: the server reported an error on the connection (a
	// permission violation on Subject, a slow consumer).
	NoticeAsyncError = "async_error"
	// NoticeEmbeddedStarted: Dial started an embedded server at URL.
	NoticeEmbeddedStarted = "embedded_started"
)

// Notice is something a NATS connection went through that its owner may
// want to log. The bus package logs nothing itself: a service passes a
// Notify that logs at its edge, with its own fields.
type Notice struct {
	// Kind is one of the Notice* constants.
	Kind string
	// URL is the server's (redacted) URL, when known.
	URL string
	// Subject is the subject of an async error, when it has one.
	Subject string
	// Err is the error, if any.
	Err error
	// RetryIn is the wait before the next connection attempt.
	RetryIn time.Duration
}

// Notify receives Notices; nil drops them.
type Notify func(Notice)

func (n Notify) send(nt Notice) {
	if n != nil {
		n(nt)
	}
}
