package workload

// SetBefore sets the worker's hook, called before each statement (tests
// hold the worker with it).
func (c *Collector) SetBefore(f func()) { c.before = f }
