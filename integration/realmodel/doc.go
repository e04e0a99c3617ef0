// Package realmodel holds the real-model smoke suite: the proxy in front of
// the demo database, asking a real Ollama (scripts/realmodels.sh builds and
// starts it and sets NLPROXY_REAL_OLLAMA). It asserts the machinery, never
// accuracy: a 270M model writes poor SQL, and every ask must still end in
// rows or a clean SQLSTATE within its budget with the session usable.
package realmodel
