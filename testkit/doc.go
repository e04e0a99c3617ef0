// Package testkit holds what tests and benchmarks share, apart from the
// end-to-end suites in integration/: throwaway Postgres clusters (pgtest),
// a scripted Ollama (fakeollama), real client tools driven from Go
// (clienttest), the simulated evaluation (evalsim) and polling for what no
// event announces (poll). Nothing here is linked into the nlproxy binary.
package testkit
