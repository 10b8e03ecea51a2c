package main

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestServeMoved: "wheelq serve" says where the dashboard went
// (wheelq-server), before connecting anywhere.
func TestServeMoved(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"serve", "-addr", "127.0.0.1:0"}, &out, &errb)
	require.Equal(t, 2, code)
	require.Contains(t, errb.String(), "wheelq-server")
	require.Contains(t, errb.String(), "queue.start=false")
}

// lockedBuffer is a bytes.Buffer safe for a writer and a reader in two
// goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
