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
	var kv map[string]string
	var err error
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		kv, err = parseURLDSN(dsn)
	} else {
		kv, err = parseKeywordDSN(dsn)
	}
	if err != nil {
		return Upstream{}, err
	}
	host := kv["host"]
	if host == "" {
		host = "localhost"
	}
	if strings.Contains(host, ",") {
		return Upstream{}, fmt.Errorf("proxy: upstream %q: multiple hosts are not supported", dsn)
	}
	port := kv["port"]
	if port == "" {
		port = "5432"
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return Upstream{}, fmt.Errorf("proxy: upstream %q: bad port %q", dsn, port)
	}
	u := Upstream{Database: route, OverrideDatabase: kv["dbname"]}
	if strings.HasPrefix(host, "/") {
		u.Address = host + "/.s.PGSQL." + port
	} else {
		u.Address = net.JoinHostPort(host, port)
	}
	mode := UpstreamTLS(kv["sslmode"])
	switch mode {
	case "":
		mode = UpstreamTLSPrefer
	case "allow":
		mode = UpstreamTLSPrefer
	case UpstreamTLSDisable, UpstreamTLSPrefer, UpstreamTLSRequire, UpstreamTLSVerifyCA, UpstreamTLSVerifyFull:
	default:
		return Upstream{}, fmt.Errorf("proxy: upstream %q: unknown sslmode %q", dsn, mode)
	}
	if root := kv["sslrootcert"]; root != "" && mode != UpstreamTLSDisable {
		pem, err := os.ReadFile(root)
		if err != nil {
			return Upstream{}, fmt.Errorf("proxy: upstream sslrootcert: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return Upstream{}, fmt.Errorf("proxy: upstream sslrootcert %s: no certificates", root)
		}
		u.TLSConfig = &tls.Config{RootCAs: pool}
		// libpq: require with a root certificate behaves like verify-ca.
		if mode == UpstreamTLSRequire {
			mode = UpstreamTLSVerifyCA
		}
	}
	u.TLS = mode
	return u, nil
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
		var val strings.Builder
		if i < len(s) && s[i] == '\'' {
			i++
			for {
				if i >= len(s) {
					return nil, fmt.Errorf("proxy: upstream DSN: unterminated quoted value for %q", key)
				}
				c := s[i]
				if c == '\\' && i+1 < len(s) {
					val.WriteByte(s[i+1])
					i += 2
					continue
				}
				i++
				if c == '\'' {
					break
				}
				val.WriteByte(c)
			}
		} else {
			for i < len(s) && !isSpace(s[i]) {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				val.WriteByte(s[i])
				i++
			}
		}
		kv[key] = val.String()
	}
}

// Dial connects to the upstream and negotiates TLS per its mode, as every
// session does before its startup message (and the readiness check, which
// goes no further).
func (u *Upstream) Dial(ctx context.Context) (net.Conn, error) {
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
	tc := tls.Client(conn, u.clientTLSConfig(mode))
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
