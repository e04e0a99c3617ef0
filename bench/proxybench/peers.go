package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The modern poolers run as extra targets when their binaries are here; none
// is packaged for Debian, so they are built from their public sources
// outside the repository and named with -odyssey / -pgcat / -pgdog (or
// $ODYSSEY_BIN, $PGCAT_BIN, $PGDOG_BIN). So is a second PgBouncer
// (-pgbouncer-src, $PGBOUNCER_SRC_BIN: the current release beside Debian's).
// A peer target whose binary is missing is left out of the run with a note.

// peerBin resolves a peer's binary: the flag, else the environment
// variable, else the name on PATH; "" if none is found.
func peerBin(flagVal, env, name string) string {
	for _, c := range []string{flagVal, os.Getenv(env)} {
		if c != "" {
			if _, err := os.Stat(c); err == nil {
				return c
			}
		}
	}
	if name == "" {
		return ""
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	return ""
}

// odysseyConf renders an Odyssey config: session pooling, no client
// authentication (as PgBouncer's trust), one worker thread like PgBouncer's
// single loop, logging off.
func odysseyConf(dir string, listenPort int, upHost string, upPort, poolSize int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "daemonize no\nunix_socket_dir %q\nunix_socket_mode \"0644\"\nlocks_dir %q\n", dir, dir)
	fmt.Fprintf(&b, "log_format \"%%p %%t %%l [%%i %%s] (%%c) %%m\\n\"\nlog_to_stdout yes\nlog_debug no\nlog_config no\nlog_session no\nlog_query no\nlog_stats no\n")
	fmt.Fprintf(&b, "workers 1\nresolvers 1\nnodelay yes\nreadahead 8192\ncache_coroutine 0\ncoroutine_stack_size 16\n")
	fmt.Fprintf(&b, "listen {\n\thost \"127.0.0.1\"\n\tport %d\n\tbacklog 128\n\ttls \"disable\"\n}\n", listenPort)
	fmt.Fprintf(&b, "storage \"pg\" {\n\ttype \"remote\"\n\thost %q\n\tport %d\n}\n", upHost, upPort)
	fmt.Fprintf(&b, "database default {\n\tuser default {\n\t\tauthentication \"none\"\n\t\tstorage \"pg\"\n")
	fmt.Fprintf(&b, "\t\tpool \"session\"\n\t\tpool_size %d\n\t\tpool_discard no\n\t\tpool_reserve_prepared_statement no\n\t}\n}\n", poolSize)
	return b.String()
}

func startOdyssey(ctx context.Context, bin, upHost string, upPort, poolSize int) (_ *proc, _ int, err error) {
	dir, port, err := peerWorkspace("odyssey")
	if err != nil {
		return nil, 0, err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	conf := filepath.Join(dir, "odyssey.conf")
	if err := os.WriteFile(conf, []byte(odysseyConf(dir, port, upHost, upPort, poolSize)), 0o600); err != nil {
		return nil, 0, fmt.Errorf("odyssey conf: %w", err)
	}
	p, err := startProc(ctx, "odyssey", filepath.Join(dir, "odyssey.out"), nil, nil, bin, conf)
	if err != nil {
		return nil, 0, err
	}
	p.tmpDir = dir
	return p, port, nil
}

// pgcatConf renders a PgCat config: session pooling, one shard, the
// benchmark's user with trust authentication (as PgBouncer's), one worker
// thread like the others' single loop.
func pgcatConf(listenPort int, upHost string, upPort int, user, db string, poolSize int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[general]\nhost = \"127.0.0.1\"\nport = %d\nworker_threads = 1\n", listenPort)
	fmt.Fprintf(&b, "admin_username = \"proxybench\"\nadmin_password = \"proxybench\"\n")
	fmt.Fprintf(&b, "log_client_connections = false\nlog_client_disconnections = false\n")
	fmt.Fprintf(&b, "\n[pools.%s]\npool_mode = \"session\"\n", db)
	fmt.Fprintf(&b, "\n[pools.%s.users.0]\nusername = %q\npassword = \"\"\nauth_type = \"trust\"\npool_size = %d\n", db, user, poolSize)
	fmt.Fprintf(&b, "\n[pools.%s.shards.0]\nservers = [[%q, %d, \"primary\"]]\ndatabase = %q\n", db, upHost, upPort, db)
	return b.String()
}

func startPgcat(ctx context.Context, bin, upHost string, upPort int, user, db string, poolSize int) (_ *proc, _ int, err error) {
	dir, port, err := peerWorkspace("pgcat")
	if err != nil {
		return nil, 0, err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	conf := filepath.Join(dir, "pgcat.toml")
	if err := os.WriteFile(conf, []byte(pgcatConf(port, upHost, upPort, user, db, poolSize)), 0o600); err != nil {
		return nil, 0, fmt.Errorf("pgcat conf: %w", err)
	}
	p, err := startProc(ctx, "pgcat", filepath.Join(dir, "pgcat.out"), nil, []string{"RUST_LOG=warn"}, bin, conf)
	if err != nil {
		return nil, 0, err
	}
	p.tmpDir = dir
	return p, port, nil
}

// pgdogTLS is PgDog's TLS: the certificate and key offered to clients, which
// must then use TLS, and TLS to the server ("prefer": PgDog has no
// require-without-verification mode, and the benchmark's Postgres always
// accepts TLS when TLS is on).
type pgdogTLS struct{ cert, key string }

// pgdogConf renders PgDog's two files: pgdog.toml (session pooling, one
// primary, one worker thread like the others' single loop, trust for the
// benchmark's user as PgBouncer's, the query parser and prepared-statement
// handling at their defaults) and users.toml.
func pgdogConf(listenPort int, upHost string, upPort int, user, db string, poolSize int, tls *pgdogTLS) (conf, users string) {
	var b strings.Builder
	fmt.Fprintf(&b, "[general]\nhost = \"127.0.0.1\"\nport = %d\nworkers = 1\n", listenPort)
	fmt.Fprintf(&b, "pooler_mode = \"session\"\ndefault_pool_size = %d\nmin_pool_size = 0\nauth_type = \"trust\"\n", poolSize)
	if tls != nil {
		fmt.Fprintf(&b, "tls_certificate = %q\ntls_private_key = %q\ntls_client_required = true\ntls_verify = \"prefer\"\n", tls.cert, tls.key)
	} else {
		fmt.Fprintf(&b, "tls_verify = \"disabled\"\n")
	}
	fmt.Fprintf(&b, "\n[[databases]]\nname = %q\nhost = %q\nport = %d\nrole = \"primary\"\n", db, upHost, upPort)
	users = fmt.Sprintf("[[users]]\nname = %q\ndatabase = %q\npassword = \"\"\n", user, db)
	return b.String(), users
}

func startPgdog(ctx context.Context, bin, upHost string, upPort int, user, db string, poolSize int, tls *tlsFiles) (_ *proc, _ int, err error) {
	dir, port, err := peerWorkspace("pgdog")
	if err != nil {
		return nil, 0, err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	var dt *pgdogTLS
	if tls != nil {
		dt = &pgdogTLS{}
		if dt.cert, dt.key, err = tls.copyTo(dir); err != nil {
			return nil, 0, err
		}
	}
	conf, users := pgdogConf(port, upHost, upPort, user, db, poolSize, dt)
	confPath, usersPath := filepath.Join(dir, "pgdog.toml"), filepath.Join(dir, "users.toml")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		return nil, 0, fmt.Errorf("pgdog conf: %w", err)
	}
	if err := os.WriteFile(usersPath, []byte(users), 0o600); err != nil {
		return nil, 0, fmt.Errorf("pgdog users: %w", err)
	}
	p, err := startProc(ctx, "pgdog", filepath.Join(dir, "pgdog.out"), nil, []string{"RUST_LOG=warn"}, bin, "--config", confPath, "--users", usersPath)
	if err != nil {
		return nil, 0, err
	}
	p.tmpDir = dir
	return p, port, nil
}
