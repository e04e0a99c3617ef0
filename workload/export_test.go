package workload

import "time"

// SetBefore sets the worker's hook, called before each statement (tests
// hold the worker with it).
func (c *Collector) SetBefore(f func()) { c.before = f }

// LearnStats learns one read of pg_stat_statements, as the worker does.
func (c *Collector) LearnStats(database string, rows []StatRow, at time.Time) {
	c.learnStats(statsBatch{database: database, rows: rows, at: at})
}
