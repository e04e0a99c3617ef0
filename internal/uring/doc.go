// Package uring is the little of Linux's io_uring that the relay's event
// loop uses: a ring set up for one thread (IORING_SETUP_SINGLE_ISSUER and
// DEFER_TASKRUN, so completions are only ever worked on inside that thread's
// own io_uring_enter, without interrupts), submission of RECV, SEND, READ and
// ASYNC_CANCEL entries, and one call that submits what is queued and waits
// for a completion. The point is fewer kernel crossings: a send and the next
// receive go into the same io_uring_enter that waits.
//
// A Ring belongs to one goroutine that has locked its OS thread and
// created the ring on it: the kernel refuses submissions from other threads
// (EEXIST) and runs deferred completion work only for the creator.
//
// Memory handed to the kernel in an entry (a buffer's address) must stay
// where it is and alive until that entry's completion: the caller keeps
// Go heap memory referenced meanwhile (Go's heap does not move).
//
// It exists on Linux only; elsewhere the package is empty.
package uring
