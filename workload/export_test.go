package workload

import "time"

// SetBefore sets the worker's hook, called before each statement (tests
// hold the worker with it).
func (c *Collector) SetBefore(f func()) { c.before = f }

// LearnStats learns one read of pg_stat_statements, as the worker does.
func (c *Collector) LearnStats(database string, rows []StatRow, at time.Time) {
	c.learnStats(statsBatch{database: database, rows: rows, at: at})
}

// LearnRelayed learns one statement as the worker does one the relay
// captured in session.
func (c *Collector) LearnRelayed(database, role string, session uint64, sql string) {
	c.learn(observed{database: database, role: role, session: sessionDigest(role, session), sql: sql, at: time.Now()})
}
