// Package testkit holds what tests and benchmarks share, apart from the
// end-to-end suites in integration/: throwaway Postgres clusters (pgtest),
// a scripted Ollama (fakeollama), real client tools driven from Go
// (clienttest) and the simulated evaluation (evalsim). Nothing here is
// linked into the nlproxy binary.
package testkit
