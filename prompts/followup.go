package prompts

// FollowupTurn is an earlier ask of the conversation as the follow-up
// prompt shows it: never rows, only their shape.
type FollowupTurn struct {
	Question string
	SQL      string
	Columns  []string
	Rows     int  // -1 when unknown (a cached answer was not run)
	More     bool // the row count is a lower bound
}

// FollowupParams feeds the follow-up rewrite.
type FollowupParams struct {
	Question string         // required: the follow-up as asked
	Turns    []FollowupTurn // required: oldest first
}

// FollowupResult is the follow-up written as a standalone question.
type FollowupResult struct {
	Question string `json:"question"`
}

// Followup renders the prompt that rewrites a follow-up into a standalone
// question (JSON answer: FollowupResult).
func Followup(p FollowupParams) (Prompt, error) {
	if err := required("Question", p.Question); err != nil {
		return Prompt{}, err
	}
	if len(p.Turns) == 0 {
		return Prompt{}, ErrMissing
	}
	return render("followup", p, "followup.schema.json")
}
