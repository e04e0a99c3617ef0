// Package asktest holds the end-to-end tests of natural-language questions:
// real clients (psql, pgx, pgjdbc, psycopg 2/3, node-postgres) talk to an
// in-process nlproxy in front of a real PostgreSQL cluster, and the engine
// asks a scripted fake Ollama server. The package has no non-test code.
package asktest
