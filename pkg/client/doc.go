// Package client is the Go client of Sluice's HTTP API v1, for services
// that submit and follow jobs without writing HTTP by hand:
//
//	c, err := client.New("http://127.0.0.1:8080", client.WithToken(token))
//	job, _, err := c.Submit(ctx, contracts.SubmitRequest{Kind: "resize", Payload: payload})
//	done, err := c.Wait(ctx, job.ID, func(ev contracts.Event) { … progress … })
//
// Every call takes a context first; nothing is logged. Errors the server
// answered are *Error, which errors.Is matches against ErrUnauthorized,
// ErrNotFound, ErrConflict, ErrTooLarge, ErrInvalid and ErrRejected (a 429:
// Error.Limit says which limit, Error.RetryAfter how long to wait). Event
// streams are read with package sse, the same encoding the gateway writes.
package client
