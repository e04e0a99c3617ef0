package catalog

import "time"

// SetRefreshTimer replaces time.After in m's debounce of DDL-triggered
// checks, so a test decides when the gap has passed.
func SetRefreshTimer(m *Manager, after func(time.Duration) <-chan time.Time) { m.after = after }
