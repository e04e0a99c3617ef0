package llm

import "time"

// SetPoolClock replaces the pool's clock (health backoff) in tests.
func SetPoolClock(p *Pool, now func() time.Time) {
	p.mu.Lock()
	p.now = now
	p.mu.Unlock()
}

// SetDrainLimit changes how long c drains an answer it stopped using.
func SetDrainLimit(c *OllamaClient, d time.Duration) { c.drainFor = d }
