package engine

import (
	"context"

	"github.com/nlproxy/nlproxy/engine/optimize"
	"github.com/nlproxy/nlproxy/guard/sealed"
)

// DefaultOptimizeMinCost is the planner cost below which the max profile's
// optimizer leaves a settled query alone: cheap queries are not worth its
// model calls and measured runs.
const DefaultOptimizeMinCost = 10_000

// GuidedCostDescent fills the optimizer slot with engine/optimize (LaPuda's
// guided cost descent against the real planner). The stage's Model is the
// optimizer's model, so its calls count against the profile's caps; the
// ask's guard options check every proposal.
func GuidedCostDescent(o *optimize.Optimizer) Optimizer { return gcdOptimizer{o} }

type gcdOptimizer struct{ o *optimize.Optimizer }

// Optimize implements Optimizer: the chosen statement, or the confirmed
// faster equivalent, and a one-line note for the trace.
func (g gcdOptimizer) Optimize(ctx context.Context, in *GenInput, m Model, exec sealed.Executor, stmt sealed.Statement) (sealed.Statement, string, error) {
	out, err := g.o.Run(ctx, optimize.Request{Exec: exec, Statement: stmt, Question: in.Question, Guard: in.Guard, Model: m})
	if err != nil {
		return sealed.Statement{}, "", err
	}
	return out.Result, out.Summary(), nil
}
