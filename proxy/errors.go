package proxy

import (
	"errors"

	"github.com/nlproxy/nlproxy/internal/pg"
)

// The package's sentinel errors, and the errors the proxy reports on its own.

// ErrProtocol marks a malformed or unsupported client message.
var ErrProtocol = errors.New("proxy: protocol violation")

// errQuiet ends a session without further reporting (e.g. a CancelRequest).
var errQuiet = errors.New("proxy: connection done")

// errCopyIn: the server waits for COPY data, so it will not become idle;
// a marker then is passed on untranslated, and the server answers it with
// the protocol error it is.
var errCopyIn = errors.New("proxy: upstream is in COPY FROM STDIN")

func shutdownError() *pg.Error {
	return &pg.Error{Severity: "FATAL", Code: pg.CodeAdminShutdown, Message: "terminating connection due to administrator command (nlproxy shutting down)"}
}

// translatorError is what the client is sent for a translator's error:
// internal/pg's one mapping (a Translator other than nlproxy's engine may
// return any error).
func translatorError(err error) *pg.Error { return pg.ErrorFor(err) }
