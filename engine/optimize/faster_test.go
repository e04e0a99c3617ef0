package optimize

import (
	"testing"
	"time"
)

func TestFaster(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name       string
		orig, cand time.Duration
		ratio      float64
		want       bool
	}{
		{"twice as fast", 40 * ms, 20 * ms, 0.5, true},
		{"exactly the minimum gain", 10 * ms, 9 * ms, 0.9, true},
		{"medians close", 10 * ms, 9500 * time.Microsecond, 0.8, false},
		{"paired ratio close", 10 * ms, 5 * ms, 0.95, false},
		{"slower", 10 * ms, 12 * ms, 1.2, false},
		// 0.3 ms against 0.2 ms is 1.5x, and the noise of a round trip.
		{"sub-millisecond saving", 300 * time.Microsecond, 200 * time.Microsecond, 0.66, false},
		{"saves exactly the minimum", 3 * ms, 2 * ms, 0.66, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := faster(tc.orig, tc.cand, tc.ratio, DefaultMinGain, DefaultMinSaving); got != tc.want {
				t.Errorf("faster(%v, %v, %.2f) = %v, want %v", tc.orig, tc.cand, tc.ratio, got, tc.want)
			}
		})
	}
}

func TestMinSaving(t *testing.T) {
	for _, tc := range []struct {
		set, want time.Duration
	}{{0, DefaultMinSaving}, {-1, 0}, {5 * time.Millisecond, 5 * time.Millisecond}} {
		if got := (&Optimizer{MinSaving: tc.set}).minSaving(); got != tc.want {
			t.Errorf("MinSaving %v: %v, want %v", tc.set, got, tc.want)
		}
	}
}
