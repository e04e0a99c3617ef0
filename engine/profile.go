package engine

import (
	"fmt"
	"sort"
	"strings"

	"github.com/nlproxy/nlproxy/engine/optimize"
	"github.com/nlproxy/nlproxy/internal/pg"
)

// Profile says what fills each stage slot of a translation and how much it
// may spend. The built-in profiles are fast, balanced and max (Profiles);
// an operator picks one per proxy and per database, a user per ask with
// `/* ask(max): … */`.
type Profile struct {
	Name string
	// ModelSchemaSelection adds the model-assisted schema selection (CHESS:
	// filter columns, select tables, select columns) on top of the
	// deterministic one, when the schema does not fit the budget whole.
	ModelSchemaSelection bool
	// Generators make the candidates, each run once; their order is the
	// order of candidates in the result.
	Generators []Generator
	// Fixer repairs a candidate the guard refused or whose trial run failed,
	// at most FixRounds times per candidate.
	Fixer     Fixer
	FixRounds int
	// Selector picks among candidates whose results disagree; nil picks the
	// largest cluster.
	Selector Selector
	// Optimizer rewrites the chosen statement for speed; nil skips it.
	Optimizer Optimizer
	// WorkloadExamples lets the model turn the workload queries offered
	// for a question into question→SQL pairs, once per query, at most
	// Engine.WorkloadExamples model calls per ask (workloadpairs.go).
	WorkloadExamples bool

	// Hard caps: model calls (every request to the model, repairs
	// included), prompt+completion tokens, and wall time as a multiple of
	// the engine's AskTimeout (0 means 1), so one operator setting scales
	// every profile. A stage that would pass a call or token cap is not
	// started; the ask settles with the candidates it has.
	MaxLLMCalls int
	MaxTokens   int
	WallTimes   int

	// AbstainBelow: when the answer's confidence is below it the ask fails
	// with CodeAbstained, listing the readings it considered. 0 never
	// abstains on confidence.
	AbstainBelow float64
	// AlternativesBelow: below it the answer is given with a NOTICE listing
	// the other readings.
	AlternativesBelow float64
}

// Profile names.
const (
	ProfileFast     = "fast"
	ProfileBalanced = "balanced"
	ProfileMax      = "max"
)

// Profiles returns the built-in profiles by name. Each call returns fresh
// values, so a caller may adjust them (e.g. fill the optimizer slot).
func Profiles() map[string]*Profile {
	fix := llmFixer{}
	return map[string]*Profile{
		ProfileFast: {
			Name: ProfileFast,
			// Direct for a small or slow model, else divide and conquer.
			Generators:  []Generator{adaptiveGenerator{cot: cotGenerator{method: methodDivide}}},
			Fixer:       fix,
			FixRounds:   2,
			MaxLLMCalls: 4,
			MaxTokens:   40_000,
		},
		ProfileBalanced: {
			Name:                 ProfileBalanced,
			ModelSchemaSelection: true,
			// The first candidate is direct for a small or slow model.
			Generators: []Generator{
				adaptiveGenerator{cot: cotGenerator{method: methodDivide}},
				cotGenerator{method: methodPlan, temperature: 0.2},
				cotGenerator{method: methodDivide, temperature: 0.7, shuffle: true},
			},
			Fixer:             fix,
			FixRounds:         2,
			Selector:          unitTestSelector{tests: 3},
			WorkloadExamples:  true,
			MaxLLMCalls:       16,
			MaxTokens:         160_000,
			WallTimes:         2,
			AbstainBelow:      0.3,
			AlternativesBelow: 0.6,
		},
		ProfileMax: {
			Name:                 ProfileMax,
			ModelSchemaSelection: true,
			Generators: []Generator{
				cotGenerator{method: methodDivide},
				cotGenerator{method: methodPlan},
				syntheticGenerator{examples: 4},
				decomposeGenerator{maxSteps: 3},
				cotGenerator{method: methodDivide, temperature: 0.8, shuffle: true},
				cotGenerator{method: methodPlan, temperature: 0.8, shuffle: true},
			},
			Fixer:             fix,
			FixRounds:         2,
			Selector:          pairwiseSelector{maxClusters: 3},
			Optimizer:         GuidedCostDescent(&optimize.Optimizer{MinCost: DefaultOptimizeMinCost}),
			WorkloadExamples:  true,
			MaxLLMCalls:       30,
			MaxTokens:         320_000,
			WallTimes:         4,
			AbstainBelow:      0.3,
			AlternativesBelow: 0.6,
		},
	}
}

// ProfileNames lists the built-in profile names, sorted.
func ProfileNames() []string {
	var out []string
	for n := range Profiles() {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// profileFor resolves which profile an ask uses: the ask's own choice, else
// the database's, else the engine's default, else fast.
func (e *Engine) profileFor(req Request) (*Profile, error) {
	name := req.Profile
	if name == "" {
		name = e.DatabaseProfiles[req.Database]
	}
	if name == "" {
		name = e.DefaultProfile
	}
	if name == "" {
		name = ProfileFast
	}
	name = strings.ToLower(name)
	if p, ok := e.profiles[name]; ok {
		return p, nil
	}
	return nil, &pg.Error{Code: CodeInvalidParameter, Message: fmt.Sprintf("nlproxy: unknown profile %q", name),
		Hint: "Profiles: " + strings.Join(e.profileNames(), ", ") + ", e.g. /* ask(max): … */"}
}

func (e *Engine) profileNames() []string {
	var out []string
	for n := range e.profiles {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
