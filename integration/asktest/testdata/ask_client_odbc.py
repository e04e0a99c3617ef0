"""Asks through nlproxy with psqlodbc and unixODBC (pyodbc), default DSN
settings (UseServerSidePrepare=1), with autocommit and in the driver's own
transaction.

Usage: ask_client_odbc.py CONNECTION-STRING TOPIC
Prints, per mode, "MODE plain: 42", one "MODE FORM: cols=a,b rows=1,x;2,y"
line per ask form and per prepared ask, and "MODE tx: kept=1".
"""
import sys

import pyodbc


def show(label, cur):
    cols = ",".join(d[0] for d in cur.description)
    rows = ";".join(",".join(str(v) for v in r) for r in cur.fetchall())
    print(f"{label}: cols={cols} rows={rows}", flush=True)


def main():
    connstr, topic = sys.argv[1], sys.argv[2]
    for mode, autocommit in (("autocommit", True), ("transaction", False)):
        conn = pyodbc.connect(connstr, autocommit=autocommit)
        cur = conn.cursor()
        cur.execute("SELECT 40 + 2")
        print(f"{mode} plain: {cur.fetchone()[0]}", flush=True)
        cur.execute("SELECT ? + 2", 40)
        print(f"{mode} plain params: {cur.fetchone()[0]}", flush=True)
        forms = {
            "comment": f"/* ask: {topic} via odbc {mode} comment */",
            "dash": f"-- ask: {topic} via odbc {mode} dash",
            "bare": f"ASK {topic} via odbc {mode} bare;",
            "func": f"SELECT * FROM nlproxy.ask('{topic} via odbc {mode} func')",
        }
        for form, sql in forms.items():
            cur.execute(sql)
            show(f"{mode} {form}", cur)
            cur.execute("SELECT 42")  # the statement after an ask
            print(f"{mode} after {form}: {cur.fetchone()[0]}", flush=True)
        sql = f"-- ask: {topic} via odbc {mode} prepared"
        for i in (1, 2):  # pyodbc prepares once and executes the statement again
            cur.execute(sql)
            show(f"{mode} prepared {i}", cur)
        cur.execute(f"CREATE TEMP TABLE odbc_{mode} (x int)")
        cur.execute(f"/* ask: {topic} via odbc {mode} before insert */")
        show(f"{mode} before insert", cur)
        cur.execute(f"INSERT INTO odbc_{mode} VALUES (1)")
        conn.commit()
        cur.execute(f"SELECT count(*) FROM odbc_{mode}")
        print(f"{mode} tx: kept={cur.fetchone()[0]}", flush=True)
        conn.close()


main()
