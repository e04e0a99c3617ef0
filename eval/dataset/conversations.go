package dataset

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// Conversation is a run of questions asked in one session, each after the
// ones before: a follow-up ("only the Italian ones") is answered against
// the earlier turns.
type Conversation struct {
	ID    string `json:"id"`
	DB    string `json:"db"`
	Turns []Turn `json:"turns"`
}

// Turn is one question of a conversation with its gold SQL. Standalone is
// the question as it reads without the earlier turns ("" when it already
// stands alone): what a reader of the conversation understands it as.
type Turn struct {
	Question   string `json:"question"`
	Standalone string `json:"standalone,omitempty"`
	Gold       string `json:"gold"`
}

// ReadConversations reads a JSON list of conversations (see
// datasets/followups).
func ReadConversations(path string) ([]Conversation, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cs []Conversation
	if err := json.Unmarshal(b, &cs); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrDataset, path, err)
	}
	seen := map[string]bool{}
	for _, c := range cs {
		if c.ID == "" || c.DB == "" || len(c.Turns) == 0 || seen[c.ID] {
			return nil, fmt.Errorf("%w: %s: conversation %q needs a unique id, a db and turns", ErrDataset, path, c.ID)
		}
		seen[c.ID] = true
		for i, t := range c.Turns {
			if strings.TrimSpace(t.Question) == "" || strings.TrimSpace(t.Gold) == "" {
				return nil, fmt.Errorf("%w: %s: conversation %s turn %d needs a question and gold SQL", ErrDataset, path, c.ID, i+1)
			}
		}
	}
	return cs, nil
}

// Questions are the turns as questions, in order: ID "<conversation>/<n>",
// Conversation and Turn set, so the runner asks them in one session.
func Questions(cs []Conversation) []Question {
	var out []Question
	for _, c := range cs {
		for i, t := range c.Turns {
			out = append(out, Question{ID: fmt.Sprintf("%s/%d", c.ID, i+1), DB: c.DB, Question: t.Question, Gold: t.Gold,
				Category: "conversation", Conversation: c.ID, Turn: i + 1, Standalone: t.Standalone})
		}
	}
	return out
}
