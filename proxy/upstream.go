package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// UpstreamTLS is the TLS mode towards an upstream, with libpq sslmode semantics.
type UpstreamTLS string

const (
	UpstreamTLSDisable    UpstreamTLS = "disable"
	UpstreamTLSPrefer     UpstreamTLS = "prefer"
	UpstreamTLSRequire    UpstreamTLS = "require"
	UpstreamTLSVerifyCA   UpstreamTLS = "verify-ca"
	UpstreamTLSVerifyFull UpstreamTLS = "verify-full"
)

// Upstream is one route of the routing table.
type Upstream struct {
	// Database is the client startup database this route serves; "" is the default route.
	Database string
	// Address is host:port, or the path of a Unix socket file (starting with '/').
	Address string
	// OverrideDatabase, when set, replaces the startup database sent upstream.
	OverrideDatabase string
	// TLS is the upstream TLS mode; "" means prefer (libpq's default).
	TLS UpstreamTLS
	// TLSConfig supplies RootCAs/ServerName for the verify modes; may be nil.
	TLSConfig *tls.Config
}

// ErrUpstreamTLS is returned when the upstream refuses TLS that the mode requires.
var ErrUpstreamTLS = errors.New("proxy: upstream does not support TLS")

// ParseUpstream builds an Upstream from a libpq URL (postgres://host:port/db?sslmode=…)
// or keyword/value DSN (host=… port=… dbname=… sslmode=… sslrootcert=…); route is
// the client database name it serves ("" = default). User and password are
// ignored: authentication is relayed from the client.
func ParseUpstream(route, dsn string) (Upstream, error) {
	kv, err := parseDSN(dsn)
	if err != nil {
		return Upstream{}, err
	}
	addr, err := upstreamAddress(dsn, kv["host"], kv["port"])
	if err != nil {
		return Upstream{}, err
	}
	u := Upstream{Database: route, OverrideDatabase: kv["dbname"], Address: addr}
	mode, err := parseSSLMode(dsn, kv["sslmode"])
	if err != nil {
		return Upstream{}, err
	}
	if root := kv["sslrootcert"]; root != "" && mode != UpstreamTLSDisable {
		if u.TLSConfig, err = rootCertConfig(root); err != nil {
			return Upstream{}, err
		}
		// libpq: require with a root certificate behaves like verify-ca.
		if mode == UpstreamTLSRequire {
			mode = UpstreamTLSVerifyCA
		}
	}
	u.TLS = mode
	return u, nil
}

// parseDSN reads a libpq URL or keyword/value DSN into its keywords.
func parseDSN(dsn string) (map[string]string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		return parseURLDSN(dsn)
	}
	return parseKeywordDSN(dsn)
}

// upstreamAddress is host:port, or a Unix socket's path where host is a
// directory, with libpq's defaults (localhost, 5432).
func upstreamAddress(dsn, host, port string) (string, error) {
	if host == "" {
		host = "localhost"
	}
	if strings.Contains(host, ",") {
		return "", fmt.Errorf("proxy: upstream %q: multiple hosts are not supported", dsn)
	}
	if port == "" {
		port = "5432"
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return "", fmt.Errorf("proxy: upstream %q: bad port %q", dsn, port)
	}
	if strings.HasPrefix(host, "/") {
		return host + "/.s.PGSQL." + port, nil
	}
	return net.JoinHostPort(host, port), nil
}

// parseSSLMode reads libpq's sslmode; "" and allow are prefer.
func parseSSLMode(dsn, sslmode string) (UpstreamTLS, error) {
	mode := UpstreamTLS(sslmode)
	switch mode {
	case "":
		mode = UpstreamTLSPrefer
	case "allow":
		mode = UpstreamTLSPrefer
	case UpstreamTLSDisable, UpstreamTLSPrefer, UpstreamTLSRequire, UpstreamTLSVerifyCA, UpstreamTLSVerifyFull:
	default:
		return "", fmt.Errorf("proxy: upstream %q: unknown sslmode %q", dsn, mode)
	}
	return mode, nil
}

// rootCertConfig trusts the certificates of the PEM file root (sslrootcert).
func rootCertConfig(root string) (*tls.Config, error) {
	pem, err := os.ReadFile(root)
	if err != nil {
		return nil, fmt.Errorf("proxy: upstream sslrootcert: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("proxy: upstream sslrootcert %s: no certificates", root)
	}
	return &tls.Config{RootCAs: pool}, nil
}

func parseURLDSN(dsn string) (map[string]string, error) {
	pu, err := url.Parse(dsn)
	if err != nil {
		return nil, fmt.Errorf("proxy: upstream URL: %w", err)
	}
	kv := map[string]string{}
	if h := pu.Hostname(); h != "" {
		kv["host"] = h
	}
	if p := pu.Port(); p != "" {
		kv["port"] = p
	}
	if db := strings.TrimPrefix(pu.Path, "/"); db != "" {
		kv["dbname"] = db
	}
	for k, v := range pu.Query() {
		if len(v) > 0 {
			kv[k] = v[0]
		}
	}
	return kv, nil
}

// parseKeywordDSN parses `key=value key='quoted value'` (libpq conninfo).
func parseKeywordDSN(s string) (map[string]string, error) {
	kv := map[string]string{}
	i := 0
	for {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i == len(s) {
			return kv, nil
		}
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 {
			return nil, fmt.Errorf("proxy: upstream DSN: missing '=' after %q", s[i:])
		}
		key := strings.TrimSpace(s[i : i+eq])
		i += eq + 1
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		var val string
		if i < len(s) && s[i] == '\'' {
			var err error
			if val, i, err = quotedValue(s, i+1, key); err != nil {
				return nil, err
			}
		} else {
			val, i = bareValue(s, i)
		}
		kv[key] = val
	}
}

// quotedValue reads the value of key that starts at s[i], just after its
// opening quote, up to the closing one; a backslash escapes the next byte.
// next is where the rest of s starts.
func quotedValue(s string, i int, key string) (val string, next int, err error) {
	var b strings.Builder
	for {
		if i >= len(s) {
			return "", 0, fmt.Errorf("proxy: upstream DSN: unterminated quoted value for %q", key)
		}
		c := s[i]
		if c == '\\' && i+1 < len(s) {
			b.WriteByte(s[i+1])
			i += 2
			continue
		}
		i++
		if c == '\'' {
			return b.String(), i, nil
		}
		b.WriteByte(c)
	}
}

// bareValue reads an unquoted value that starts at s[i], up to the next
// space; a backslash escapes the next byte. next is where the rest starts.
func bareValue(s string, i int) (val string, next int) {
	var b strings.Builder
	for i < len(s) && !isSpace(s[i]) {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
		i++
	}
	return b.String(), i
}

// Dial connects to the upstream and negotiates TLS per its mode, as every
// session does before its startup message (and the readiness check, which
// goes no further).
func (u *Upstream) Dial(ctx context.Context) (net.Conn, error) {
	return u.dial(ctx, nil)
}

// dial is Dial with the TLS conn made over under(socket) where under is set
// (a session's: the event loop carries it after the handshake).
func (u *Upstream) dial(ctx context.Context, under func(net.Conn) net.Conn) (net.Conn, error) {
	network := "tcp"
	if strings.HasPrefix(u.Address, "/") {
		network = "unix"
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, u.Address)
	if err != nil {
		return nil, err
	}
	mode := u.TLS
	if mode == "" {
		mode = UpstreamTLSPrefer
	}
	if mode == UpstreamTLSDisable || network == "unix" {
		return conn, nil
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
		defer conn.SetDeadline(time.Time{})
	}
	if _, err := conn.Write([]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}); err != nil {
		conn.Close()
		return nil, err
	}
	var resp [1]byte
	if _, err := io.ReadFull(conn, resp[:]); err != nil {
		conn.Close()
		return nil, err
	}
	switch resp[0] {
	case sslAccepted:
	case sslRefused:
		if mode == UpstreamTLSPrefer {
			return conn, nil
		}
		conn.Close()
		return nil, ErrUpstreamTLS
	default:
		conn.Close()
		return nil, fmt.Errorf("%w: unexpected reply %q to SSLRequest", ErrProtocol, resp[0])
	}
	tlsOver := conn
	if under != nil {
		tlsOver = under(conn)
	}
	tc := tls.Client(tlsOver, u.clientTLSConfig(mode))
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("TLS handshake: %w", err)
	}
	return tc, nil
}

func (u *Upstream) clientTLSConfig(mode UpstreamTLS) *tls.Config {
	var cfg *tls.Config
	if u.TLSConfig != nil {
		cfg = u.TLSConfig.Clone()
	} else {
		cfg = &tls.Config{}
	}
	host, _, _ := net.SplitHostPort(u.Address)
	switch mode {
	case UpstreamTLSVerifyFull:
		if cfg.ServerName == "" {
			cfg.ServerName = host
		}
	case UpstreamTLSVerifyCA:
		// Verify the chain but not the host name, as libpq does.
		roots := cfg.RootCAs
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("proxy: upstream sent no certificate")
			}
			opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(opts)
			return err
		}
	default:
		// prefer/require: encryption without verification (libpq semantics).
		cfg.InsecureSkipVerify = true
	}
	return cfg
}
