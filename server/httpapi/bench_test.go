package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wheelq/wheelq"
	"github.com/wheelq/wheelq/server/httpapi"
)

// BenchmarkSchedule: one job per call, from parallel goroutines: the
// library's Schedule (the baseline) and the same through the HTTP API
// with keep-alive. Compare ns/op as a ratio (benchstat), interleaved
// runs.
func BenchmarkSchedule(b *testing.B) {
	for _, via := range []string{"library", "http"} {
		b.Run(via, func(b *testing.B) {
			e := setupBench(b)
			var n atomic.Int64
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			body := []byte(`{"payload":"0123456789012345678901234567890123456789012345678901234567890123","delay_ms":3600000}`)
			b.ReportAllocs()
			b.SetParallelism(16)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					k := n.Add(1)
					if via == "library" {
						if _, err := e.q.Schedule(context.Background(), "t", body[12:76], wheelq.ID(fmt.Sprint("l", k)), wheelq.After(time.Hour)); err != nil {
							b.Error(err)
							return
						}
						continue
					}
					resp, err := c.Post(e.srv.URL+"/v1/jobs/t", "application/json", bytes.NewReader(body))
					if err != nil || resp.StatusCode != 201 {
						b.Errorf("%v %v", err, resp)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body) // so the connection is reused
					resp.Body.Close()
				}
			})
		})
	}
}

func setupBench(b *testing.B) *env { return setupTB(b) }

// BenchmarkDecode: a schedule request's body decoded as the server does
// for every request (strictly: unknown fields and trailing data refused).
func BenchmarkDecode(b *testing.B) {
	body := `{"id":"order-1234","payload":"0123456789012345678901234567890123456789012345678901234567890123","delay_ms":3600000}` + "\n"
	b.ReportAllocs()
	for b.Loop() {
		var req httpapi.ScheduleRequest
		if err := httpapi.Decode(strings.NewReader(body), &req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReserveStream: jobs of a pulled topic read from one POST
// /v1/reserve/stream (up to 100 a reservation) and acked with POST
// /v1/ack by an acker of their own, which sends what came while its last
// request was out (up to 100), as a busy consumer does: per job, what the
// server (and this in-process client) allocates. That garbage is what the
// server's collector keeps up with at thousands of jobs a second. "due"
// has the jobs come due 100 µs apart (10,000 a second, as W1: each handed
// to the waiting stream as it comes due); "backlog" has them all due
// before the stream opens (taken from the ready sets).
func BenchmarkReserveStream(b *testing.B) {
	b.Run("due", func(b *testing.B) { benchReserveStream(b, 100*time.Microsecond) })
	b.Run("backlog", func(b *testing.B) { benchReserveStream(b, 0) })
}

func benchReserveStream(b *testing.B, apart time.Duration) {
	e := setupServe(b, nil, defaultOpts(), false, "p")
	ctx := context.Background()
	payload := []byte("0123456789012345678901234567890123456789012345678901234567890123")
	first := time.Now().Add(300 * time.Millisecond)
	if apart == 0 {
		first = time.Now()
	}
	jobs := make([]wheelq.BatchJob, 0, 1000)
	for i := 0; i < b.N; {
		jobs = jobs[:0]
		for ; i < b.N && len(jobs) < cap(jobs); i++ {
			jobs = append(jobs, wheelq.BatchJob{Topic: "p", Payload: payload,
				Options: []wheelq.Option{wheelq.At(first.Add(time.Duration(i) * apart))}})
		}
		res, err := e.q.ScheduleBatch(ctx, jobs)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
		}
	}
	if apart == 0 {
		time.Sleep(200 * time.Millisecond) // all in the ready sets
	}
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	receipts := make(chan httpapi.Receipt, b.N)
	acked := make(chan error, 1)
	go func() {
		batch := make([]httpapi.Receipt, 0, 100)
		for r := range receipts {
			batch = append(batch[:0], r)
		more:
			for len(batch) < cap(batch) {
				select {
				case r, ok := <-receipts:
					if !ok {
						break more
					}
					batch = append(batch, r)
				default:
					break more
				}
			}
			body, _ := json.Marshal(httpapi.AckBatchRequest{Receipts: batch})
			resp, err := c.Post(e.srv.URL+"/v1/ack", "application/json", bytes.NewReader(body))
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("ack: %s", resp.Status)
				}
			}
			if err != nil {
				acked <- err
				for range receipts {
				}
				return
			}
		}
		acked <- nil
	}()
	b.ReportAllocs()
	b.ResetTimer()
	// A stream ends after its max (100) jobs; the next is opened at once.
	for got := 0; got < b.N; {
		resp, err := c.Post(e.srv.URL+"/v1/reserve/stream", "application/json",
			strings.NewReader(`{"topics":["p"],"max":100,"wait_ms":60000}`))
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("stream: %v %v", err, resp)
		}
		dec := json.NewDecoder(resp.Body)
		for ; got < b.N; got++ {
			var r httpapi.Reserved
			if err := dec.Decode(&r); err == io.EOF {
				break
			} else if err != nil {
				b.Fatalf("after %d jobs: %v", got, err)
			}
			receipts <- httpapi.Receipt{Topic: r.Topic, ID: r.ID, Token: r.Token}
		}
		resp.Body.Close()
	}
	close(receipts)
	if err := <-acked; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
}
