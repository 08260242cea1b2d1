// Command healthprobe is the container health check of the Sluice image:
// the image is distroless (no shell, no curl), so compose.yaml runs
//
//	healthprobe http://127.0.0.1:8080/readyz
//
// which exits 0 when the URL answers 2xx within the timeout and 1
// otherwise, printing why.
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: healthprobe URL")
		os.Exit(2)
	}
	if err := probe(os.Args[1], 3*time.Second); err != nil {
		fmt.Fprintln(os.Stderr, "healthprobe:", err)
		os.Exit(1)
	}
}

// probe GETs url and reports an error unless it answers 2xx within timeout.
func probe(url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("%s: %s %s", url, resp.Status, body)
	}
	return nil
}
