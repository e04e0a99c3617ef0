package proxy

import (
	"encoding/binary"
	"fmt"
)

// Startup-phase request codes (the int32 after the length).
const (
	codeCancel  = 80877102
	codeSSL     = 80877103
	codeGSSENC  = 80877104
	protoMajor3 = 3
	// maxStartupLen is Postgres's MAX_STARTUP_PACKET_LENGTH.
	maxStartupLen = 10000
	// maxSecretLen is the longest cancel secret protocol 3.2 allows.
	maxSecretLen = 256
)

type startupKind int

const (
	startupMessage startupKind = iota
	startupSSL
	startupGSSENC
	startupCancel
)

// param is one startup parameter, kept in client order.
type param struct{ Name, Value string }

// startupPacket is a decoded startup-phase packet (without its length word).
type startupPacket struct {
	Kind    startupKind
	Version uint32  // protocol version for startupMessage
	Params  []param // for startupMessage
	// Cancel key for startupCancel; Secret may be longer than 4 bytes (protocol 3.2).
	PID    uint32
	Secret []byte
}

func (p *startupPacket) get(name string) (string, bool) {
	for _, kv := range p.Params {
		if kv.Name == name {
			return kv.Value, true
		}
	}
	return "", false
}

// parseStartup decodes a startup-phase packet body: the bytes after the
// 4-byte length. All returned data is copied.
func parseStartup(body []byte) (startupPacket, error) {
	if len(body) < 4 {
		return startupPacket{}, fmt.Errorf("%w: startup packet too short", ErrProtocol)
	}
	code := binary.BigEndian.Uint32(body)
	rest := body[4:]
	switch code {
	case codeSSL:
		if len(rest) != 0 {
			return startupPacket{}, fmt.Errorf("%w: bad SSLRequest length", ErrProtocol)
		}
		return startupPacket{Kind: startupSSL}, nil
	case codeGSSENC:
		if len(rest) != 0 {
			return startupPacket{}, fmt.Errorf("%w: bad GSSENCRequest length", ErrProtocol)
		}
		return startupPacket{Kind: startupGSSENC}, nil
	case codeCancel:
		if len(rest) < 8 || len(rest) > 4+maxSecretLen {
			return startupPacket{}, fmt.Errorf("%w: bad CancelRequest length", ErrProtocol)
		}
		return startupPacket{
			Kind:   startupCancel,
			PID:    binary.BigEndian.Uint32(rest),
			Secret: append([]byte(nil), rest[4:]...),
		}, nil
	}
	return parseStartupMessage(code, rest)
}

// parseStartupMessage decodes a StartupMessage after its version word:
// protocol 3, a user among the parameters.
func parseStartupMessage(version uint32, rest []byte) (startupPacket, error) {
	if version>>16 != protoMajor3 {
		return startupPacket{}, fmt.Errorf("%w: unsupported frontend protocol %d.%d", ErrProtocol, version>>16, version&0xffff)
	}
	params, err := parseParams(rest)
	if err != nil {
		return startupPacket{}, err
	}
	p := startupPacket{Kind: startupMessage, Version: version, Params: params}
	if u, _ := p.get("user"); u == "" {
		return startupPacket{}, fmt.Errorf("%w: no PostgreSQL user name specified in startup packet", ErrProtocol)
	}
	return p, nil
}

// parseParams decodes NUL-terminated name and value pairs up to the empty
// name that ends the packet.
func parseParams(rest []byte) ([]param, error) {
	var params []param
	for {
		if len(rest) == 0 {
			return nil, fmt.Errorf("%w: startup packet not terminated", ErrProtocol)
		}
		if rest[0] == 0 {
			if len(rest) != 1 {
				return nil, fmt.Errorf("%w: trailing bytes in startup packet", ErrProtocol)
			}
			return params, nil
		}
		name, r, ok := cstring(rest)
		if !ok {
			return nil, fmt.Errorf("%w: unterminated startup parameter name", ErrProtocol)
		}
		value, r, ok := cstring(r)
		if !ok {
			return nil, fmt.Errorf("%w: missing value for startup parameter %q", ErrProtocol, name)
		}
		params = append(params, param{name, value})
		rest = r
	}
}

// encodeStartup builds a StartupMessage with its length word.
func encodeStartup(version uint32, params []param) []byte {
	b := make([]byte, 8, 64)
	binary.BigEndian.PutUint32(b[4:], version)
	for _, kv := range params {
		b = append(b, kv.Name...)
		b = append(b, 0)
		b = append(b, kv.Value...)
		b = append(b, 0)
	}
	b = append(b, 0)
	binary.BigEndian.PutUint32(b, uint32(len(b)))
	return b
}

func encodeCancel(pid uint32, secret []byte) []byte {
	b := make([]byte, 12, 12+len(secret))
	binary.BigEndian.PutUint32(b, uint32(12+len(secret)))
	binary.BigEndian.PutUint32(b[4:], codeCancel)
	binary.BigEndian.PutUint32(b[8:], pid)
	return append(b, secret...)
}

// cstring splits a NUL-terminated string off b.
func cstring(b []byte) (string, []byte, bool) {
	for i, c := range b {
		if c == 0 {
			return string(b[:i]), b[i+1:], true
		}
	}
	return "", nil, false
}
