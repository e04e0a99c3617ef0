package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// pgpoolConf renders a pgpool-II 4.x config: one backend in raw mode (no
// replication or load balancing, so every query goes to it), connection
// cache on, children that live for the whole run, no health checks.
// num_init_children bounds concurrent clients (pgpool forks one process per
// client slot), so it is sized above the largest pgbench -c.
func pgpoolConf(dir string, listenPort, pcpPort int, upHost string, upPort, children int) string {
	var b strings.Builder
	set := func(k, v string) { fmt.Fprintf(&b, "%s = %s\n", k, v) }
	q := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	set("backend_clustering_mode", q("raw"))
	set("listen_addresses", q("127.0.0.1"))
	set("port", fmt.Sprint(listenPort))
	set("unix_socket_directories", q(dir))
	set("pcp_listen_addresses", q(""))
	set("pcp_port", fmt.Sprint(pcpPort))
	set("pcp_socket_dir", q(dir))
	set("backend_hostname0", q(upHost))
	set("backend_port0", fmt.Sprint(upPort))
	set("backend_weight0", "1")
	set("backend_flag0", q("DISALLOW_TO_FAILOVER"))
	set("num_init_children", fmt.Sprint(children))
	set("max_pool", "1")
	set("child_life_time", "0")
	set("child_max_connections", "0")
	set("connection_life_time", "0")
	set("client_idle_limit", "0")
	set("connection_cache", "on")
	set("load_balance_mode", "off")
	set("enable_pool_hba", "off")
	set("pool_passwd", q(""))
	set("health_check_period", "0")
	set("sr_check_period", "0")
	set("failover_on_backend_error", "off")
	set("memory_cache_enabled", "off")
	set("use_watchdog", "off")
	set("log_destination", q("stderr"))
	set("log_connections", "off")
	set("log_statement", "off")
	set("pid_file_name", q(filepath.Join(dir, "pgpool.pid")))
	set("logdir", q(dir))
	return b.String()
}

// startPgpool starts pgpool-II in the foreground (-n) with its files in a
// fresh temp dir; Stop removes the dir.
func startPgpool(ctx context.Context, bin, upHost string, upPort, children int) (_ *proc, _ int, err error) {
	dir, port, err := peerWorkspace("pgpool")
	if err != nil {
		return nil, 0, err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	pcpPort, err := freePort()
	if err != nil {
		return nil, 0, err
	}
	conf := filepath.Join(dir, "pgpool.conf")
	if err := os.WriteFile(conf, []byte(pgpoolConf(dir, port, pcpPort, upHost, upPort, children)), 0o600); err != nil {
		return nil, 0, fmt.Errorf("pgpool conf: %w", err)
	}
	pcp := filepath.Join(dir, "pcp.conf")
	if err := os.WriteFile(pcp, nil, 0o600); err != nil {
		return nil, 0, fmt.Errorf("pcp conf: %w", err)
	}
	// -D: ignore any saved backend status; the backend is always up here.
	p, err := startProc(ctx, "pgpool", filepath.Join(dir, "pgpool.out"), nil, nil, bin, "-n", "-D", "-f", conf, "-F", pcp)
	if err != nil {
		return nil, 0, err
	}
	p.tmpDir = dir
	return p, port, nil
}
