// Package realmodel holds the real-model smoke suite: the proxy in front of
// the demo database and sql-eval's restaurants, asking a real Ollama
// (scripts/realmodels.sh builds and starts it and sets NLPROXY_REAL_OLLAMA).
// It asserts the machinery, never accuracy: a 270M model writes poor SQL,
// and every ask must still end in rows or a clean SQLSTATE within its budget
// with the session usable. NLPROXY_REAL_TRANSCRIPTS=DIR keeps every chat
// exchange as a transcript for engine/llm/testdata/real.
package realmodel
