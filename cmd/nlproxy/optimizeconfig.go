package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/nlproxy/nlproxy/engine/optimize"
)

// OptimizeConfig tunes guided cost descent, both for optimize: and for the
// max profile's last stage.
type OptimizeConfig struct {
	// Tolerance: consecutive invalid or not-cheaper proposals that end a run.
	Tolerance int
	// Runs: independent descents pooled per optimization (LaPuda's k).
	Runs int
	// MaxCalls bounds the model calls of one optimization, runs together.
	MaxCalls int
	// TimingRuns: measured runs of the original and each finalist (medians).
	TimingRuns int
	// MinGain: the least measured gain that counts as faster (0.1 = 10%).
	MinGain float64
	// MinSaving: the least time per run a rewrite must save to count as
	// faster; smaller differences are measurement noise.
	MinSaving Duration
	// MinCost: in the max profile, settled queries the planner costs below
	// this are run as they are (optimize: always tries).
	MinCost float64
}

func (o OptimizeConfig) validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		v    int
	}{{"optimize-tolerance", o.Tolerance}, {"optimize-runs", o.Runs}, {"optimize-max-calls", o.MaxCalls}, {"optimize-timing-runs", o.TimingRuns}} {
		if f.v < 1 {
			errs = append(errs, fmt.Errorf("%s %d: want at least 1", f.name, f.v))
		}
	}
	// A step is an instruction call and a rewrite call.
	if o.MaxCalls == 1 {
		errs = append(errs, errors.New("optimize-max-calls 1: a step takes 2 calls"))
	}
	if o.MinGain <= 0 || o.MinGain >= 1 {
		errs = append(errs, fmt.Errorf("optimize-min-gain %g: want more than 0 and less than 1", o.MinGain))
	}
	if o.MinSaving < 0 {
		errs = append(errs, fmt.Errorf("optimize-min-saving %v: must not be negative", o.MinSaving))
	}
	if o.MinCost < 0 {
		errs = append(errs, fmt.Errorf("optimize-min-cost %g: must not be negative", o.MinCost))
	}
	return errors.Join(errs...)
}

// optimizer is guided cost descent as configured. optimize: gives it the
// model client; the max profile's stage gets the ask's budgeted model per
// request and a MinCost below which it does not try.
func (o OptimizeConfig) optimizer() *optimize.Optimizer {
	saving := time.Duration(o.MinSaving)
	if saving == 0 {
		saving = -1 // the optimizer's zero means its default
	}
	return &optimize.Optimizer{Tolerance: o.Tolerance, Runs: o.Runs, MaxCalls: o.MaxCalls,
		TimingRuns: o.TimingRuns, MinGain: o.MinGain, MinSaving: saving}
}
