// Package proxy is nlproxy's PostgreSQL wire relay.
//
// # Where it sits
//
// The relay and the engine stand side by side and do not import each other;
// router (the adapter) and cmd/nlproxy (the wiring) are the only packages
// that know both (docs/architecture.md draws the whole tree). The seam is
// four things this package declares and others fill in:
//
//   - Translator turns a marker into a Translation. router.Translator
//     implements it with the engine: it dispatches ask, ask-sql, optimize,
//     ask(all) and the table-function form, and maps errors to SQLSTATEs.
//   - Executor is what this package hands the Translator so that trial runs
//     happen on the client's own session (the engine's Executor is the same
//     interface).
//   - AskFuncParser (Server.AskFuncs, or the Translator when it is one)
//     reads the table-function form: the relay parses no SQL itself.
//   - Server.OnAsk receives an AskRecord per settled ask, with the engine's
//     account (internal/askreport) when there is one; the recorders (audit
//     log, admin page, metrics) are wired in cmd/nlproxy.
//
// What runs on a client's session is a sealed Statement from guard/sealed,
// run inside one of that package's scopes (read-only, bounded, resolution
// pinned). That leaf is the only part of the guard the relay imports; only
// the guard (which parses with pg_query) can make a Statement. So this
// package, and all it imports, builds without cgo (`make vet` checks
// CGO_ENABLED=0 go build ./proxy/...; internal/archtest checks the arrows).
//
// # Where things are
//
// The files stand in layers, each using those below it. Two knots remain:
// server.go, session.go and evloop_state_linux.go (the event loops' types)
// refer to each other, as the Server holds its sessions and loops and they
// hold it; and the event loop's core (evloop_linux.go) and its TLS and
// io_uring parts call each other.
//
//   - wire basics: messages.go (message type bytes), startup.go, wire.go
//     (frames, encoders, outBuf), errors.go, upstream.go, listen_*.go,
//     clientgone_*.go; marker.go, lifecycle.go and askfunc.go read a
//     statement's text; api.go is what the Translator and OnAsk see,
//     observe.go the StatementObserver;
//   - session state: queue.go (the reply queue), shared.go, server.go (the
//     Server's configuration, routes and cancel keys), session.go,
//     evloop_state_linux.go;
//   - what a message does: handlers.go (onClient, onServer: every relay
//     calls them), handshake.go, inject.go (the proxy's own messages),
//     intercept.go (asks), executor.go, spool.go, bigask.go, encoding.go,
//     audit.go, limits.go, stats.go;
//   - the relays: relay.go (two goroutines), tracked.go and replies.go
//     (tracked mode), evloop_linux.go (the event loop);
//   - serve.go: accepting, running each session, shutdown.
//
// # How it relays
//
// A Server accepts clients on TCP or Unix-socket listeners (ListenUnix),
// handles the startup phase itself (SSLRequest with optional TLS termination,
// never on a Unix socket; GSSENCRequest refused; CancelRequest forwarded via a
// map from the client's key — the backend's real PID and a proxy-issued
// secret — to the backend's real key), picks an Upstream by the startup
// database, and relays authentication end to end (trust, password, md5,
// SCRAM-SHA-256; SCRAM-SHA-256-PLUS is not offered to clients whose TLS ends
// at the proxy). Each session leaves an info-level audit trail (accepted,
// ready or refused, ended) in the Logger.
//
// After ReadyForQuery each session runs two goroutines, one per direction.
// Messages are framed by their 5-byte header and copied straight from a 64 KiB
// read buffer to the other side; runs of messages that need no inspection are
// written in one piece, and output is flushed only when the input buffer is
// empty. Only these are looked at: client Query and Parse (first bytes, for a
// natural-language marker), Sync/FunctionCall (to count outstanding requests),
// and server ReadyForQuery (transaction status), CommandComplete (DDL hook) and
// ErrorResponse (only while a marker error is pending). A slow client stops
// the server-side reader, so memory stays bounded.
//
// Marker statements (see ParseMarker) are handled by the client goroutine:
// it waits until the upstream is idle, lets the Translator run trial queries
// through the session's Executor, and forwards the generated SQL in place of
// the marker text (for Parse: the statement stays in the proxy's table and is
// prepared upstream only for the Bind or Describe that needs it, see askStmt
// and lifecycle.go). A batch prefix not yet sent is
// held back while translating, so pipelined statements keep their order. When
// there is no Translator, or it fails, the proxy sends the invalid statement
// "nlproxy_marker_failed" upstream in the marker's place and replaces the
// resulting syntax error with its own error: Postgres itself then provides the
// ordering, skip-until-Sync and transaction semantics (a failed marker inside
// a transaction block leaves it failed, status 'E', like any error).
//
// Known limits: with TLS terminated at the proxy and TLS to the upstream,
// SCRAM fails for clients that support channel binding (pgx, libpq ≥ 13 send
// the "y" flag, which a TLS upstream rejects as a downgrade); use a plaintext
// upstream link, md5, or channel_binding=disable in the client. A marker Parse
// that follows messages of its batch already flushed upstream (batch larger
// than the buffer, or a Flush before it) is answered with 0A000.
package proxy
