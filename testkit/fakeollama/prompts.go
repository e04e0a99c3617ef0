package fakeollama

// Substrings that tell nlproxy's pipeline prompts apart (prompts/templates),
// for rules that answer one stage and not another. One place, so that a
// template's wording changes one line of the tests.
const (
	PromptKeywords  = "You pick search terms"
	PromptCandidate = "Divide: split the question"
	PromptFixer     = "did not work as it should"
	PromptFollowup  = "You rewrite a follow-up question"
	// ask(all)'s stages
	PromptSwitch = "You decide whether a question needs data"
	PromptPlan   = "You plan how to answer a question from several"
	PromptReturn = "You check whether one SQL query's result"
	PromptAnswer = "You answer a question from the results of SQL"
)
