// Package askall (tests only) drives questions across databases (ask(all):)
// through the real proxy, real Postgres (several databases, an
// authenticator role, row-level security), the fake Ollama server and real
// clients (psql, pgjdbc, pgx).
package askall
