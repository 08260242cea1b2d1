package bus

import (
	"context"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// ConnectOptions say where and how to connect.
type ConnectOptions struct {
	// URL of the NATS server(s); ignored when InProcess is set.
	URL string
	// InProcess connects to an embedded server without a socket.
	InProcess *server.Server
	// Name is the client name the server shows (the service name).
	Name string
	// Token, User and Password authenticate, when set.
	Token, User, Password string
	// InboxPrefix is the prefix of this connection's reply subjects
	// (nats.CustomInboxPrefix). Empty: ServiceInboxPrefix(User, Name), a
	// prefix of this connection alone under the services' root, which no
	// tenant may read.
	InboxPrefix string
	// Notify hears what the connection goes through (nil: nobody).
	Notify Notify
}

// ServiceInboxPrefix is the inbox prefix of a new service connection:
// contracts.ServiceInboxPrefix of its NATS user (its client name when it
// has none) and a fresh NUID, so that no two connections share one.
func ServiceInboxPrefix(user, name string) string {
	who := user
	if who == "" {
		who = name
	}
	return contracts.ServiceInboxPrefix(who, nuid.Next())
}

// Connect dials NATS, retrying with exponential backoff until it succeeds or
// ctx ends. The connection reconnects forever afterwards; o.Notify hears of
// each failed attempt, disconnect, reconnect and async error.
func Connect(ctx context.Context, o ConnectOptions) (*nats.Conn, error) {
	notify := o.Notify
	opts := []nats.Option{
		nats.Name(o.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(100*time.Millisecond, time.Second),
		nats.Timeout(2 * time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil is a deliberate close
				notify.send(Notice{Kind: NoticeDisconnected, Err: err})
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			notify.send(Notice{Kind: NoticeReconnected, URL: c.ConnectedUrlRedacted()})
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			nt := Notice{Kind: NoticeAsyncError, Err: err}
			if sub != nil {
				nt.Subject = sub.Subject
			}
			notify.send(nt)
		}),
	}
	inbox := o.InboxPrefix
	if inbox == "" {
		inbox = ServiceInboxPrefix(o.User, o.Name)
	}
	opts = append(opts, nats.CustomInboxPrefix(inbox))
	if o.InProcess != nil {
		opts = append(opts, nats.InProcessServer(o.InProcess))
	}
	if o.Token != "" {
		opts = append(opts, nats.Token(o.Token))
	}
	if o.User != "" {
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	}
	url := o.URL
	if url == "" {
		url = nats.DefaultURL
	}
	b := backoff.WithContext(backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(100*time.Millisecond),
		backoff.WithMaxInterval(5*time.Second),
		backoff.WithMaxElapsedTime(0),
	), ctx)
	var nc *nats.Conn
	err := backoff.RetryNotify(func() error {
		c, err := nats.Connect(url, opts...)
		if err != nil {
			return err
		}
		nc = c
		return nil
	}, b, func(err error, next time.Duration) {
		notify.send(Notice{Kind: NoticeConnectFailed, Err: err, RetryIn: next})
	})
	if err != nil {
		return nil, fmt.Errorf("connect nats %s: %w", url, err)
	}
	return nc, nil
}
