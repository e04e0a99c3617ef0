// Package askreport holds the engine's account of an ask: plain data the
// router fills from the engine's result and hands through the proxy to the
// recorders (audit log, metrics, admin page). It sits below both so that
// neither the proxy nor the recorders need the engine, nor the engine the
// proxy.
package askreport

import "time"

// Report is the engine's account of how it answered a question (the
// router fills it from engine.Result), for the audit log, metrics and the
// admin page. Nothing in it reaches the client.
type Report struct {
	Role       string // current_user the ask was answered for
	SQL        string // settled SQL as written
	Profile    string
	Cached     bool
	Confidence float64 // in [0, 1]; negative when the engine could not judge it
	LLMCalls   int
	// PromptTokens and CompletionTokens sum over the stages.
	PromptTokens, CompletionTokens int
	// ClientEnded counts model answers the engine stopped reading once
	// they were complete or repeating: their tokens are those read, while
	// the server wrote on to its end (drained, unread).
	ClientEnded int
	Stages      []Stage
	Candidates  []Candidate
}

// Candidate is one SQL candidate the engine weighed.
type Candidate struct {
	Generator string
	SQL       string
	Fixes     int
	Usable    bool
	Cluster   int    // result cluster among usable candidates; -1 when not usable
	Problem   string // why it is unusable or doubtful
	Chosen    bool
}

// Stage is one engine stage of an ask.
type Stage struct {
	Name                           string
	Duration                       time.Duration
	LLMCalls                       int
	PromptTokens, CompletionTokens int
	Note                           string // what it chose and why
}
