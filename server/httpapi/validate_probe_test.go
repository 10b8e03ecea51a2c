package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// fakeTB records whether Errorf was called.
type fakeTB struct {
	testing.TB
	failed bool
}

func (f *fakeTB) Errorf(format string, args ...any) { f.failed = true }
func (f *fakeTB) Helper()                           {}

// TestValidatorCatches: the response checker of the other tests fails a
// response the document does not allow (so its silence means something).
func TestValidatorCatches(t *testing.T) {
	f := &fakeTB{TB: t}
	h := validated(f, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		w.Write([]byte(`{"topic":1}`))
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/v1/jobs/x", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !f.failed {
		t.Fatal("a bad response passed")
	}
}
