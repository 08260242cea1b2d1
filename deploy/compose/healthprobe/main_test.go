package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestProbe(t *testing.T) {
	t.Parallel()
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer ok.Close()
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"nats":"not connected"}`, http.StatusServiceUnavailable)
	}))
	defer down.Close()

	require.NoError(t, probe(ok.URL+"/readyz", time.Second))
	err := probe(down.URL+"/readyz", time.Second)
	require.ErrorContains(t, err, "503")
	require.ErrorContains(t, err, "not connected")
	require.Error(t, probe("http://127.0.0.1:1/readyz", time.Second))
}
