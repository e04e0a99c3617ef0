//go:build !linux

package main

import "io"

// watchReaderGone is Linux-only (it relies on poll's POLLERR for a pipe
// without readers); elsewhere a closed stdout is noticed at the next write.
func watchReaderGone(io.Writer, func()) (stop func()) { return func() {} }
