package main

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// StreamResult is one large-result transfer.
type StreamResult struct {
	Rows        int64   `json:"rows"`
	DataRowMB   float64 `json:"datarow_mb"`    // DataRow message bytes (header included)
	WireMB      float64 `json:"wire_mb"`       // bytes read from the socket during the query
	Seconds     float64 `json:"seconds"`       // query sent → CommandComplete
	MBPerSecond float64 `json:"mb_per_second"` // wire MB / seconds
}

// countingConn counts bytes read from the server.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// streamQuery runs sql over the simple protocol and discards every row,
// counting what arrives. MB are 10^6 bytes.
func streamQuery(ctx context.Context, url, sql string) (StreamResult, error) {
	var res StreamResult
	cfg, err := pgconn.ParseConfig(url)
	if err != nil {
		return res, fmt.Errorf("parse url: %w", err)
	}
	var read atomic.Int64
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, n: &read}, nil
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return res, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())

	before := read.Load()
	start := time.Now()
	mrr := conn.Exec(ctx, sql)
	var dataRowBytes int64
	for mrr.NextResult() {
		rr := mrr.ResultReader()
		for rr.NextRow() {
			res.Rows++
			// DataRow: type(1) + length(4) + field count(2) + per field length(4) + value.
			n := int64(7)
			for _, v := range rr.Values() {
				n += 4 + int64(len(v))
			}
			dataRowBytes += n
		}
		if _, err := rr.Close(); err != nil {
			return res, fmt.Errorf("stream: %w", err)
		}
	}
	if err := mrr.Close(); err != nil {
		return res, fmt.Errorf("stream: %w", err)
	}
	elapsed := time.Since(start)
	res.Seconds = elapsed.Seconds()
	res.DataRowMB = float64(dataRowBytes) / 1e6
	res.WireMB = float64(read.Load()-before) / 1e6
	if res.Seconds > 0 {
		res.MBPerSecond = res.WireMB / res.Seconds
	}
	return res, nil
}

// rssSampler polls a process's VmRSS and VmHWM until stopped.
type rssSampler struct {
	pid     int
	stop    chan struct{}
	wg      sync.WaitGroup
	maxRSS  int64 // kB, highest VmRSS seen
	lastHWM int64 // kB
}

func startRSSSampler(pid int, every time.Duration) *rssSampler {
	s := &rssSampler{pid: pid, stop: make(chan struct{})}
	s.sample()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.sample()
			}
		}
	}()
	return s
}

func (s *rssSampler) sample() {
	if v, err := procStatusKB(s.pid, "VmRSS"); err == nil && v > s.maxRSS {
		s.maxRSS = v
	}
	if v, err := procStatusKB(s.pid, "VmHWM"); err == nil && v > s.lastHWM {
		s.lastHWM = v
	}
}

// Stop ends sampling, takes a final sample and returns (max VmRSS, VmHWM) in kB.
func (s *rssSampler) Stop() (maxRSS, hwm int64) {
	close(s.stop)
	s.wg.Wait()
	s.sample()
	return s.maxRSS, s.lastHWM
}
