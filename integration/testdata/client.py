"""Runs the shared client scenario with psycopg2 or psycopg 3 and prints one
line per step; the Go test compares the lines. Connection settings come from
the libpq PG* environment variables.

usage: client.py psycopg2|psycopg3 [default|prepare|binary|client|pipeline]
"""
import sys

TYPES_SQL = ("SELECT 42::int4, 'héllo wörld ✓ 日本語'::text, 12345.6789::numeric, "
             "'2024-01-02 03:04:05.123+00'::timestamptz, '\\xdeadbeef'::bytea, NULL::text")
MARKER_SQL = "/* ask: how many rows are in tx_t */ SELECT 1"


def fmt(v):
    if v is None:
        return "null"
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    if hasattr(v, "timestamp"):
        return str(round(v.timestamp() * 1000))
    return str(v)


def row(r):
    return "|".join(fmt(v) for v in r)


def scenario(conn, cur_factory, sqlstate, errors, param_style):
    def one(sql, params=None):
        cur = cur_factory()
        cur.execute(sql, params)
        r = cur.fetchone()
        cur.close()
        return r

    print("simple:", row(one("SELECT 1")))
    print("param:", row(one("SELECT %s::int + 1, %s::text" if param_style else "SELECT 42, 'x'",
                            (41, "héllo ✓ 日本"))))
    print("types:", row(one(TYPES_SQL)))
    try:
        one("SELECT 1/0")
        print("error: none")
    except errors as e:
        print("error:", sqlstate(e))
        conn.rollback()
    print("recovered:", row(one("SELECT 2")))
    cur = cur_factory()
    cur.execute("CREATE TEMP TABLE tx_t(x int)")
    conn.commit()
    cur.execute("INSERT INTO tx_t VALUES (1)")
    conn.rollback()
    print("rollback:", row(one("SELECT count(*) FROM tx_t")))
    conn.rollback()
    try:
        one(MARKER_SQL)
        print("marker: none")
    except errors as e:
        print("marker:", sqlstate(e))
        conn.rollback()
    print("after-marker:", row(one("SELECT 3")))


def run_psycopg2():
    import psycopg2
    conn = psycopg2.connect("")
    print("connect: ok", "ssl" if conn.info.ssl_in_use else "plain")
    scenario(conn, conn.cursor, lambda e: e.pgcode, psycopg2.Error, True)
    conn.close()


def run_psycopg3(mode):
    import psycopg
    conn = psycopg.connect("", prepare_threshold=0 if mode == "prepare" else 5)
    print("connect: ok", "ssl" if conn.pgconn.ssl_in_use else "plain")
    if mode == "binary":
        factory = lambda: conn.cursor(binary=True)
    elif mode == "client":
        factory = lambda: psycopg.ClientCursor(conn)
    elif mode == "prepare":
        class Prepared(psycopg.Cursor):
            def execute(self, query, params=None, **kw):
                return super().execute(query, params, prepare=True, **kw)
        factory = lambda: Prepared(conn)
    else:
        factory = conn.cursor
    scenario(conn, factory, lambda e: e.sqlstate, psycopg.Error, True)
    if mode == "pipeline":
        # Several statements and an error in one pipeline: psycopg sends them
        # without intermediate Syncs and recovers at the pipeline's Sync.
        with conn.pipeline() as p:
            c1 = conn.cursor()
            c1.execute("SELECT 1")
            c2 = conn.cursor()
            c2.execute("SELECT %s::int * 2", (21,))
            p.sync()
            print("pipeline:", row(c1.fetchone()), row(c2.fetchone()))
        try:
            with conn.pipeline():
                conn.execute("SELECT 1/0")
                conn.execute("SELECT 5")
            print("pipeline-error: none")
        except psycopg.Error as e:
            print("pipeline-error:", e.sqlstate)
        conn.rollback()
        print("pipeline-after:", row(conn.execute("SELECT 6").fetchone()))
    conn.close()


if __name__ == "__main__":
    if sys.argv[1] == "psycopg2":
        run_psycopg2()
    else:
        run_psycopg3(sys.argv[2] if len(sys.argv) > 2 else "default")
