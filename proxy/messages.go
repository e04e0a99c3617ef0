package proxy

// The protocol's message types, and the one place that says what each
// message passed through the relay does to the session's state: onClient for
// a frontend message on its way upstream, onServer for a backend message on
// its way to the client. Every relay calls them — the goroutine relay
// (clientLoop, serverLoop), the event loop (clientMsg, serverMsg) and
// tracked mode (trackedRequest and its handlers, trackedReply) — so a
// change to message handling is made here once and holds on all of them.
// The relays differ only in how they read and write (bufio readers,
// the loop's pipes, whole messages queued with their replies).

// Frontend (client → server) message types.
const (
	feBind         byte = 'B'
	feClose        byte = 'C'
	feCopyData     byte = 'd'
	feCopyDone     byte = 'c'
	feCopyFail     byte = 'f'
	feDescribe     byte = 'D'
	feExecute      byte = 'E'
	feFlush        byte = 'H'
	feFunctionCall byte = 'F'
	feParse        byte = 'P'
	fePassword     byte = 'p' // also SASL responses and GSS data
	feQuery        byte = 'Q'
	feSync         byte = 'S'
	feTerminate    byte = 'X'
)

// Backend (server → client) message types.
const (
	beAuthentication      byte = 'R'
	beBackendKeyData      byte = 'K'
	beBindComplete        byte = '2'
	beCloseComplete       byte = '3'
	beCommandComplete     byte = 'C'
	beCopyBothResponse    byte = 'W'
	beCopyInResponse      byte = 'G'
	beDataRow             byte = 'D'
	beEmptyQueryResponse  byte = 'I'
	beErrorResponse       byte = 'E'
	beNoData              byte = 'n'
	beNoticeResponse      byte = 'N'
	beNotification        byte = 'A'
	beParameterStatus     byte = 'S'
	beParseComplete       byte = '1'
	bePortalSuspended     byte = 's'
	beReadyForQuery       byte = 'Z'
	beRowDescription      byte = 'T'
	beParameterDescriptor byte = 't'
)

// The one-byte answers to an SSLRequest.
const (
	sslAccepted byte = 'S'
	sslRefused  byte = 'N'
)

// Object types of Describe and Close.
const (
	objStatement byte = 'S'
	objPortal    byte = 'P'
)

// Transaction status of ReadyForQuery.
const (
	txIdle   byte = 'I'
	txInTx   byte = 'T'
	txFailed byte = 'E'
)
